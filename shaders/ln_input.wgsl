// The mul_mat_ln module's src1 loader: the layer norm of src1, the fused chain norm -> mul
// -> add -> mul_mat (crate/webgpu/fuse.rs). The prologue stages the workgroup's columns of
// src1 (contiguous columns of b_ne.x) in workgroup memory, normalised (two passes, mean
// then the variance of x - mean, each a tree over the 64 invocations' partial sums, as the
// norm kernel sums; f.x = eps), times slot 6 (the weight row) plus slot 7 (the bias row); `ldx` reads
// them there. Columns times b_ne.x is at most
// LN_MAX (fuse.rs checks).

const LN_MAX: u32 = 3328u;
var<workgroup> ln_x: array<f32, LN_MAX>;
var<workgroup> ln_red: array<vec4<f32>, 64>;
var<private> ln_base: u32;

fn ldx(i: u32) -> f32 { return ln_x[i - ln_base]; }

// The sums of `v` (one per column) over the workgroup's 64 invocations, in every one: a
// tree, as accurate as the norm kernel's (summing the 64 partial sums in a row instead
// moved a Q4_K case's logits by 6e-4 on SwiftShader).
fn ln_sum(li: u32, v: vec4<f32>) -> vec4<f32> {
    ln_red[li] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s / 2u) {
        if (li < s) { ln_red[li] += ln_red[li + s]; }
        workgroupBarrier();
    }
    let r = ln_red[0];
    workgroupBarrier();
    return r;
}

fn x_prologue(li: u32, n0: u32) {
    let k_len = p.b_ne.x;
    let ncol = min(NCOL, p.b_ne.y - n0);
    ln_base = p.off.y + n0 * p.b_nb.y;
    var s = vec4<f32>(0.0);
    for (var c = 0u; c < ncol; c++) {
        for (var k = li; k < k_len; k += 64u) {
            let x = ld1_f32(ln_base + c * k_len + k);
            ln_x[c * k_len + k] = x;
            s[c] += x;
        }
    }
    let mean = ln_sum(li, s) / f32(k_len);
    var q = vec4<f32>(0.0);
    for (var c = 0u; c < ncol; c++) {
        for (var k = li; k < k_len; k += 64u) {
            let d = ln_x[c * k_len + k] - mean[c];
            q[c] += d * d;
        }
    }
    let rstd = 1.0 / sqrt(ln_sum(li, q) / f32(k_len) + p.f.x);
    for (var c = 0u; c < ncol; c++) {
        for (var k = li; k < k_len; k += 64u) {
            let i = c * k_len + k;
            ln_x[i] = (ln_x[i] - mean[c]) * rstd[c] * ld6_f32(p.off2.z + k * p.g.z) + ld7_f32(p.off2.w + k * p.g.w);
        }
    }
    workgroupBarrier();
}
