//! Block quantization formats with ggml's layouts: dequantize, quantize, and the
//! `vec_dot` kernels quantized `mul_mat` uses. Filled in by the quant-format work.
