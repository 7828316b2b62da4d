// The tiles of the products with stored weights (matvec_f16, its F32 form
// matvec_f32w, and matvec_quant; matvec_q8_0 keeps its own loop, a row of
// A at a time): a
// workgroup of WG invocations owns R rows of W at a time (grid-stride) and
// takes the m rows of A T at a time, so each weight is read and decoded
// once for T rows of A (a decode batch's sequences, a prompt's tokens)
// instead of once per row. Each shader is compiled twice: T = 1 and T = 4
// (TILE_ROWS; the "_x4" pipelines), and the device sends a product's rows
// in whole tiles of 4 to the one and the rest to the other (m is a
// multiple of T). An invocation sums its share of each (row of A, row of
// W) pair in acc[t * R + r] in the order it would with T = 1, and
// store_tile sums every pair's parts in the same order, so a row of A gets
// the same bits whatever rows share its product.
//
// The including shader declares `c` (the output) and `p` (with c_off and n)
// first.

#ifndef TILE_ROWS
#define TILE_ROWS 1
#endif

const uint WG = 64u;
const uint R = 4u;
const uint T = TILE_ROWS;

shared float red[R * T * WG];

// Reduces the workgroup's acc and writes C[t0 + t][j0 + r] for the T rows
// of A and `rows` rows of W of the tile: invocation q < R * T sums the
// WG invocations' parts of pair q in their order, so a pair's sum does not
// depend on T (nor on how the device splits a workgroup into subgroups).
// Two barriers a tile: on lavapipe a barrier costs more than the 63 adds
// a tree of barriers would share out. Every invocation calls it.
void store_tile(float acc[R * T], uint tid, uint j0, uint rows, uint t0) {
  for (uint q = 0u; q < R * T; ++q)
    red[q * WG + tid] = acc[q];
  barrier();
  if (tid < R * T) {
    uint t = tid / R, r = tid % R;
    float s = red[tid * WG];
    for (uint i = 1u; i < WG; ++i)
      s += red[tid * WG + i];
    if (r < rows)
      c[p.c_off + (t0 + t) * p.n + j0 + r] = s;
  }
  barrier();
}
