// x rounded to the nearest IEEE half (ties to even), as a float: what
// llama.cpp's F16 cache holds and how its F16 and Q8_0 products round
// activations and scales. Integer arithmetic on the bits, not
// unpackHalf2x16(packHalf2x16(x)): NVIDIA's Vulkan driver folds that pair
// away (seen on an H200: attention over an f32 cache read the values
// unrounded), while a stored packHalf2x16 (to_f16.comp) rounds as the host
// does there too.
float half_round(float x) {
  uint u = floatBitsToUint(x);
  uint s = u & 0x80000000u;
  uint a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) // infinity, NaN
    return x;
  if (a >= 0x477ff000u) // 65520 and beyond: past the largest half, 65504
    return uintBitsToFloat(s | 0x7f800000u);
  if (a < 0x38800000u) { // below 2^-14: subnormal halves, 2^-24 apart
    float r = roundEven(uintBitsToFloat(a) * 16777216.0) * (1.0 / 16777216.0);
    return uintBitsToFloat(s | floatBitsToUint(r));
  }
  // 13 mantissa bits dropped, to nearest, ties to even (a carry into the
  // exponent is the next power of two, as it should be).
  a += 0xfffu + ((a >> 13u) & 1u);
  return uintBitsToFloat(s | (a & 0xffffe000u));
}
