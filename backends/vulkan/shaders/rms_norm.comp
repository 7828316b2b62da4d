#version 450
// out[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * w[i].
// One workgroup per row at a time (grid-stride over rows): the invocations
// sum squares over strided elements, reduce in shared memory, then scale.
// out may be x: every element is read before it is written, by the same
// invocation, after the reduction's barriers.
//
// FLOAT64 (rms_norm_fp64, devices with shaderFloat64): the host's
// arithmetic (ggml's): float squares summed in double, the mean divided in
// double and rounded to float, eps added and the root taken in float. The
// tree's order is not the host's one chain, which changes the float mean
// only where the two double sums straddle a float's rounding boundary
// (about dim x 2^-29 a row). The root and the division are the device's
// (correctly rounded on lavapipe).

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer buf_x { float x[]; };
layout(set = 0, binding = 1) readonly buffer buf_w { float w[]; };
layout(set = 0, binding = 2) buffer buf_o { float o[]; };

layout(push_constant) uniform params {
  uint x_off;
  uint w_off;
  uint o_off;
  uint rows;
  uint dim;
  float eps;
} p;

#ifdef FLOAT64
#define SUM double
#else
#define SUM float
#endif

shared SUM red[256];

void main() {
  uint tid = gl_LocalInvocationID.x;
  for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
    uint xb = p.x_off + r * p.dim;
    uint ob = p.o_off + r * p.dim;
    SUM s = SUM(0.0);
    for (uint i = tid; i < p.dim; i += 256u) {
      float v = x[xb + i];
      precise float sq = v * v;
      s += SUM(sq);
    }
    red[tid] = s;
    barrier();
    for (uint h = 128u; h > 0u; h >>= 1u) {
      if (tid < h)
        red[tid] += red[tid + h];
      barrier();
    }
#ifdef FLOAT64
    float mean = float(red[0] / double(p.dim));
    float scale = 1.0 / sqrt(mean + p.eps);
#else
    float scale = 1.0 / sqrt(red[0] / float(p.dim) + p.eps);
#endif
    barrier(); // every invocation has read red[0] before the next row
    for (uint i = tid; i < p.dim; i += 256u)
      o[ob + i] = x[xb + i] * scale * w[p.w_off + i];
  }
}
