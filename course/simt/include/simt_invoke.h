// How the runtime calls a kernel and how Python learns its parameter types. The compiler driver
// (course/simt/compiler.py) emits, for each kernel `k` of the learner's file:
//   extern "C" void __simt_entry_k(void **args) { simt::invoke(k, args); }
//   extern "C" constexpr auto __simt_sig_k = simt::signature_text(k);   (data: the parameters' types)
// args[i] points at the value of parameter i (a device pointer or a scalar's bytes).
#pragma once
#pragma GCC system_header
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "simt_half.h"

namespace simt {

// One token per parameter, read by course/simt/kernel.py:
//   p<c?>:<code>  a pointer (c: to const) to <code>;   s:<code>  a scalar passed by value/reference
//   <code> = f4 f8 (float, double), h2 (half), i1 i2 i4 i8, u1 u2 u4 u8, b1 (bool),
//            v<size>a<align> (a vector type or struct: raw bytes)
// The tokens are built while compiling (constexpr) and stored as data, which Python reads: no code of the
// learner's file runs in the process that loads the library (docs/simt.md, "The boundary around learner
// code").
constexpr std::size_t kSignaturePerParam = 48;  // "pc:v" + 20 digits + "a" + 20 digits + ";"

template <std::size_t N> struct SignatureText {
    char text[N];
};

constexpr std::size_t put_text(char *out, std::size_t n, const char *s) {
    while (*s) out[n++] = *s++;
    return n;
}

constexpr std::size_t put_number(char *out, std::size_t n, std::size_t v) {
    char digits[20] = {};
    std::size_t k = 0;
    do {
        digits[k++] = char('0' + v % 10);
        v /= 10;
    } while (v);
    while (k) out[n++] = digits[--k];
    return n;
}

template <class T> constexpr std::size_t put_type_code(char *out, std::size_t n) {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, bool>) return put_text(out, n, "b1");
    else if constexpr (std::is_same_v<U, half>) return put_text(out, n, "h2");
    else if constexpr (std::is_floating_point_v<U>) return put_number(out, put_text(out, n, "f"), sizeof(U));
    else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) return put_number(out, put_text(out, n, "i"), sizeof(U));
    else if constexpr (std::is_integral_v<U>) return put_number(out, put_text(out, n, "u"), sizeof(U));
    else if constexpr (std::is_void_v<U>) return put_text(out, n, "v1a1");
    else return put_number(out, put_text(out, put_number(out, put_text(out, n, "v"), sizeof(U)), "a"), alignof(U));
}

template <class P> constexpr std::size_t put_param_code(char *out, std::size_t n) {
    using D = std::remove_reference_t<P>;
    if constexpr (std::is_pointer_v<D>) {
        using E = std::remove_pointer_t<D>;
        return put_type_code<E>(out, put_text(out, n, std::is_const_v<E> ? "pc:" : "p:"));
    } else {
        return put_type_code<D>(out, put_text(out, n, "s:"));
    }
}

// The compiler driver emits `extern "C" constexpr auto __simt_sig_k = simt::signature_text(k);`.
template <class... P>
constexpr SignatureText<kSignaturePerParam * sizeof...(P) + 1> signature_text(void (*)(P...)) {
    SignatureText<kSignaturePerParam * sizeof...(P) + 1> s{};
    std::size_t n = 0;
    ((n = put_text(s.text, put_param_code<P>(s.text, n), ";")), ...);
    s.text[n] = 0;
    return s;
}

template <class... P, std::size_t... I>
void invoke_impl(void (*kernel)(P...), void **args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_reference_t<P> *>(args[I])...);
}

template <class... P> void invoke(void (*kernel)(P...), void **args) {
    invoke_impl(kernel, args, std::index_sequence_for<P...>{});
}

// Metal kernels take their thread positions as parameters marked with attributes; the driver
// passes one ParamKind per parameter to simt::metal::invoke (include/metal/simt_metal.h).
enum ParamKind : int {
    kArgument = 0,                       // [[buffer(n)]] or a plain value: from args[i]
    kThreadPositionInGrid = 1,
    kThreadgroupPositionInGrid = 2,
    kThreadPositionInThreadgroup = 3,
    kThreadIndexInThreadgroup = 4,
    kThreadsPerThreadgroup = 5,
    kThreadgroupsPerGrid = 6,
    kThreadsPerGrid = 7,
    kThreadIndexInSimdgroup = 8,
    kSimdgroupIndexInThreadgroup = 9,
    kSimdgroupsPerThreadgroup = 10,
    kThreadsPerSimdgroup = 11,
    kThreadgroupMemory = 12,             // [[threadgroup(n)]]: args[i] points at an int holding n
};

}  // namespace simt
