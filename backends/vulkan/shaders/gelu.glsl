// GELU's Phi(x) and the slope d(x Phi(x)) / dx, in float. approx 0: the erf form, with
// 1 + erf(z) from the erfc approximation of Numerical Recipes (fractional error < 1.2e-7; GLSL
// has no erf); approx 1: 0.5 (1 + tanh u) as 1 / (1 + e^(-2u)), each tail from e^(-2|u|), so
// neither cancels (1 - tanh^2 u = 4 cdf (1 - cdf)).

float dpt_erfc_pos(float z) { // z >= 0
  float t = 1.0 / (1.0 + 0.5 * z);
  return t * exp(-z * z - 1.26551223 +
                 t * (1.00002368 +
                      t * (0.37409196 +
                           t * (0.09678418 +
                                t * (-0.18628806 +
                                     t * (0.27886807 +
                                          t * (-1.13520398 +
                                               t * (1.48851587 +
                                                    t * (-0.82215223 + t * 0.17087277)))))))));
}

float dpt_gelu_eval(float x, uint approx, out float slope) {
  if (approx != 0u) {
    float u = 0.7978845608 * (x + 0.044715 * x * x * x);
    float e = exp(-2.0 * min(abs(u), 40.0));
    float hi = 1.0 / (1.0 + e), lo = e / (1.0 + e);
    float cdf = u >= 0.0 ? hi : lo;
    slope = cdf + 2.0 * x * hi * lo * 0.7978845608 * (1.0 + 0.134145 * x * x);
    return cdf;
  }
  float z = x * 0.7071067812;
  float cdf = 0.5 * (z >= 0.0 ? 2.0 - dpt_erfc_pos(z) : dpt_erfc_pos(-z));
  slope = cdf + x * 0.3989422804 * exp(-0.5 * x * x);
  return cdf;
}
