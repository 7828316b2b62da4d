// fma_exact(a, b, c): a * b + c rounded once to float, as the host's
// fmaf gives it. A shader's fma() need not be fused (Vulkan lets a device
// compute it as a product and a sum, and lavapipe does), so with
// FLOAT64 (the *_fp64 variants, for devices with shaderFloat64 whose
// fma() a probe at start found unfused: vulkan_device::settle_fma) it goes
// through doubles: the product of two floats is exact in a double, the
// sum's rounding error e comes from TwoSum, and the double s = a b + c - e
// rounds to the float nearest a b + c except where s lies exactly halfway
// between two floats and e is not 0: then the exact value is past the
// midpoint on e's side. Without FLOAT64 it is the device's fma.

#ifdef FLOAT64
float fma_exact(float a, float b, float c) {
  precise double p = double(a) * double(b);
  precise double dc = double(c);
  precise double s = p + dc;
  precise double bv = s - p;
  precise double e = (p - (s - bv)) + (dc - bv);
  float r = float(s);
  precise double rd = double(r);
  if (e == 0.0 || s == rd || isinf(r) || isnan(r))
    return r;
  // r's neighbour on s's side, and the midpoint between them.
  uint bits = floatBitsToUint(r);
  bool up = s > rd;
  bool neg = (bits & 0x80000000u) != 0u;
  float other;
  if (r == 0.0)
    other = uintBitsToFloat(up ? 1u : 0x80000001u);
  else
    other = uintBitsToFloat(up != neg ? bits + 1u : bits - 1u);
  precise double mid = (rd + double(other)) * 0.5;
  if (s != mid)
    return r;
  // Halfway: e says on which side of it the exact sum lies.
  return (e > 0.0) == up ? other : r;
}
#else
float fma_exact(float a, float b, float c) { return fma(a, b, c); }
#endif
