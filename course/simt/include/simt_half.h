// IEEE binary16, shared by CUDA's __half and Metal's half. Stored as 16 bits; every operation is
// done in float and rounded back to nearest-even, which gives the same result as a GPU's fp16
// add/sub/mul/div (float has more than twice half's precision, so double rounding cannot bite).
#pragma once
#pragma GCC system_header
#include <cstdint>
#include <cstring>

namespace simt {

inline uint16_t float_to_half_bits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u)  // inf or nan (keep nan quiet and nonzero)
        return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
    if (absx >= 0x477ff000u)  // rounds to >= 65520: overflow to inf
        return static_cast<uint16_t>(sign | 0x7c00u);
    if (absx < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        if (absx < 0x33000000u) return static_cast<uint16_t>(sign);  // < half of the smallest subnormal
        // value = mant * 2^(exp - 150) and a subnormal half counts units of 2^-24, so
        // h = mant >> (126 - exp), rounded to nearest even on the bits shifted out.
        const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
        const int shift = 126 - static_cast<int>(absx >> 23);  // 14 to 24 here
        uint32_t h = mant >> shift;
        const uint32_t rest = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = ((absx - 0x38000000u) >> 13);
    const uint32_t rest = absx & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
}

inline float half_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0x1fu) {
        x = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        x = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        x = sign;
    } else {  // subnormal: normalise
        int e = -1;
        do { mant <<= 1; ++e; } while (!(mant & 0x400u));
        x = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

struct half {
    uint16_t bits;
    // Zero, and constexpr: a `__shared__ half tile[N]` / `threadgroup half tile[N]` is then
    // constant-initialised, with no hidden "initialised yet?" guard that every thread would touch.
    constexpr half() : bits(0) {}
    half(float f) : bits(float_to_half_bits(f)) {}
    half(double d) : bits(float_to_half_bits(static_cast<float>(d))) {}
    half(int i) : bits(float_to_half_bits(static_cast<float>(i))) {}
    half(unsigned i) : bits(float_to_half_bits(static_cast<float>(i))) {}
    operator float() const { return half_bits_to_float(bits); }
    static half from_bits(uint16_t b) { half h; h.bits = b; return h; }
    half &operator+=(half o) { return *this = half(float(*this) + float(o)); }
    half &operator-=(half o) { return *this = half(float(*this) - float(o)); }
    half &operator*=(half o) { return *this = half(float(*this) * float(o)); }
    half &operator/=(half o) { return *this = half(float(*this) / float(o)); }
    half operator-() const { return from_bits(bits ^ 0x8000u); }
};
inline half operator+(half a, half b) { return half(float(a) + float(b)); }
inline half operator-(half a, half b) { return half(float(a) - float(b)); }
inline half operator*(half a, half b) { return half(float(a) * float(b)); }
inline half operator/(half a, half b) { return half(float(a) / float(b)); }
inline bool operator<(half a, half b) { return float(a) < float(b); }
inline bool operator>(half a, half b) { return float(a) > float(b); }
inline bool operator<=(half a, half b) { return float(a) <= float(b); }
inline bool operator>=(half a, half b) { return float(a) >= float(b); }
inline bool operator==(half a, half b) { return float(a) == float(b); }
inline bool operator!=(half a, half b) { return float(a) != float(b); }

}  // namespace simt
