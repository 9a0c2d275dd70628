// How the runtime calls a kernel and how Python learns its parameter types. The compiler driver
// (course/simt/compiler.py) emits, for each kernel `k` of the learner's file:
//   extern "C" void __simt_entry_k(void **args) { simt::invoke(k, args); }
//   extern "C" const char *__simt_sig_k() { return simt::signature(k); }
// args[i] points at the value of parameter i (a device pointer or a scalar's bytes).
#pragma once
#pragma GCC system_header
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
template <class T> std::string type_code() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, bool>) return "b1";
    else if constexpr (std::is_same_v<U, half>) return "h2";
    else if constexpr (std::is_floating_point_v<U>) return "f" + std::to_string(sizeof(U));
    else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) return "i" + std::to_string(sizeof(U));
    else if constexpr (std::is_integral_v<U>) return "u" + std::to_string(sizeof(U));
    else if constexpr (std::is_void_v<U>) return "v1a1";
    else return "v" + std::to_string(sizeof(U)) + "a" + std::to_string(alignof(U));
}

template <class P> std::string param_code() {
    using D = std::remove_reference_t<P>;
    if constexpr (std::is_pointer_v<D>) {
        using E = std::remove_pointer_t<D>;
        return std::string(std::is_const_v<E> ? "pc:" : "p:") + type_code<E>();
    } else {
        return "s:" + type_code<D>();
    }
}

template <class... P> const char *signature(void (*)(P...)) {
    static const std::string sig = [] {
        std::string s;
        ((s += param_code<P>() + ";"), ...);
        return s;
    }();
    return sig.c_str();
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
