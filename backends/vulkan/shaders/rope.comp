#version 450
// Rotary position embedding, llama.cpp's "normal" mode, in place on
// x[rows][heads][head_dim]: the pair (x[2i], x[2i+1]) of every head of row
// r, 2i < n_rot, turns by theta = pos[r] * base^(-2i / n_rot), divided by
// ff[i] when has_ff. With neox (NEOX mode, qwen2/qwen3) pair i is
// (x[i], x[i + n_rot/2]). One invocation per pair (grid-stride).

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) buffer buf_x { float x[]; };
layout(set = 0, binding = 1) readonly buffer buf_pos { int pos[]; };
layout(set = 0, binding = 2) readonly buffer buf_ff { float ff[]; };

layout(push_constant) uniform params {
  uint x_off;
  uint pos_off;
  uint ff_off;
  uint rows;
  uint heads;
  uint head_dim;
  uint n_rot;
  uint has_ff;
  float freq_base;
  uint neox;
} p;

void main() {
  uint half_rot = p.n_rot / 2u;
  uint total = p.rows * p.heads * half_rot;
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += stride) {
    uint pair = i % half_rot;
    uint rh = i / half_rot; // row * heads + head
    uint r = rh / p.heads;
    float theta = float(pos[p.pos_off + r])
                  * pow(p.freq_base, -2.0 * float(pair) / float(p.n_rot));
    if (p.has_ff != 0u)
      theta /= ff[p.ff_off + pair];
    uint b = p.x_off + rh * p.head_dim + (p.neox != 0u ? pair : 2u * pair);
    uint o = p.neox != 0u ? half_rot : 1u;
    float c = cos(theta);
    float s = sin(theta);
    float x0 = x[b];
    float x1 = x[b + o];
    x[b] = x0 * c - x1 * s;
    x[b + o] = x0 * s + x1 * c;
  }
}
