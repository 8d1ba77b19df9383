/* The direct convolution ops' public wrappers (dpt_conv2d_fwd, _bwd_data, _bwd_weights):
 * arguments checked, then the backend's slot, as for every op (backends/backend.c). */
#include "backends/op_check.h"
#include "base/error.h"
#include "base/size.h"

/* The output plane and the element counts of x [n,c,h,w], w [co,c,kh,kw], y [n,co,oh,ow]. */
typedef struct conv_counts {
  size_t oh, ow, nx, nw, ny;
} conv_counts;

static dpt_status conv_begin(dpt_op_check *ck, const char *fn, dpt_backend *be, dpt_op op,
                             const dpt_conv_geom *g, size_t co, conv_counts *n) {
  DPT_TRY(dpt_op_begin(ck, fn, be, dpt_backend_supports(be, op)));
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", fn);
  dpt_status st = dpt_conv_out_size(g, &n->oh, &n->ow);
  if (st != DPT_OK) return dpt_error_context(st, "%s", fn);
  size_t hw, kk, plane, t;
  if (!dpt_mul_ok(g->h, g->w, &hw) || !dpt_mul_ok(g->kh, g->kw, &kk) ||
      !dpt_mul_ok(n->oh, n->ow, &plane) || !dpt_mul_ok(g->n, g->c, &t) ||
      !dpt_mul_ok(t, hw, &n->nx) || !dpt_mul_ok(co, g->c, &t) || !dpt_mul_ok(t, kk, &n->nw) ||
      !dpt_mul_ok(g->n, co, &t) || !dpt_mul_ok(t, plane, &n->ny))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: tensor sizes overflow", fn);
  return DPT_OK;
}

dpt_status dpt_conv2d_fwd(dpt_backend *be, const dpt_conv_geom *g, size_t co, const dpt_buffer *x,
                          size_t x_off, const dpt_buffer *w, size_t w_off, const dpt_buffer *bias,
                          size_t bias_off, dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  conv_counts n;
  DPT_TRY(conv_begin(&ck, "dpt_conv2d_fwd", be, DPT_OP_CONV2D_FWD, g, co, &n));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n.nx, F32));
  DPT_TRY(dpt_op_tensor(&ck, "w", w, w_off, n.nw, F32));
  if (bias) DPT_TRY(dpt_op_tensor(&ck, "bias", bias, bias_off, co, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n.ny, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n.ny, F32, "x", x, x_off, n.nx, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n.ny, F32, "w", w, w_off, n.nw, F32, 0));
  if (n.ny == 0) return DPT_OK;
  dpt_conv2d_fwd_args a = {*g,
                           co,
                           n.oh,
                           n.ow,
                           dpt_op_ref(x, x_off),
                           dpt_op_ref(w, w_off),
                           dpt_op_ref(bias, bias_off),
                           dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->conv2d_fwd(be, &a));
}

dpt_status dpt_conv2d_bwd_data(dpt_backend *be, const dpt_conv_geom *g, size_t co,
                               const dpt_buffer *dy, size_t dy_off, const dpt_buffer *w,
                               size_t w_off, dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  conv_counts n;
  DPT_TRY(conv_begin(&ck, "dpt_conv2d_bwd_data", be, DPT_OP_CONV2D_BWD_DATA, g, co, &n));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, n.ny, F32));
  DPT_TRY(dpt_op_tensor(&ck, "w", w, w_off, n.nw, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, n.nx, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n.nx, F32, "dy", dy, dy_off, n.ny, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n.nx, F32, "w", w, w_off, n.nw, F32, 0));
  if (n.nx == 0) return DPT_OK;
  dpt_conv2d_bwd_data_args a = {
      *g, co, n.oh, n.ow, dpt_op_ref(dy, dy_off), dpt_op_ref(w, w_off), dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->conv2d_bwd_data(be, &a));
}

dpt_status dpt_conv2d_bwd_weights(dpt_backend *be, const dpt_conv_geom *g, size_t co,
                                  const dpt_buffer *x, size_t x_off, const dpt_buffer *dy,
                                  size_t dy_off, dpt_buffer *dw, size_t dw_off, dpt_buffer *db,
                                  size_t db_off) {
  dpt_op_check ck;
  conv_counts n;
  DPT_TRY(conv_begin(&ck, "dpt_conv2d_bwd_weights", be, DPT_OP_CONV2D_BWD_WEIGHTS, g, co, &n));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n.nx, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, n.ny, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dw", dw, dw_off, n.nw, F32));
  DPT_TRY(dpt_op_alias(&ck, "dw", dw, dw_off, n.nw, F32, "x", x, x_off, n.nx, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dw", dw, dw_off, n.nw, F32, "dy", dy, dy_off, n.ny, F32, 0));
  if (db) {
    DPT_TRY(dpt_op_tensor(&ck, "db", db, db_off, co, F32));
    DPT_TRY(dpt_op_alias(&ck, "db", db, db_off, co, F32, "dw", dw, dw_off, n.nw, F32, 0));
    DPT_TRY(dpt_op_alias(&ck, "db", db, db_off, co, F32, "dy", dy, dy_off, n.ny, F32, 0));
  }
  if (n.nw == 0 && (!db || co == 0)) return DPT_OK;
  dpt_conv2d_bwd_weights_args a = {*g,
                                   co,
                                   n.oh,
                                   n.ow,
                                   dpt_op_ref(x, x_off),
                                   dpt_op_ref(dy, dy_off),
                                   dpt_op_ref(dw, dw_off),
                                   dpt_op_ref(db, db_off)};
  return DPT_BE_CALL(be, be->vt->conv2d_bwd_weights(be, &a));
}
