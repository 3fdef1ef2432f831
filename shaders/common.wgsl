// Prelude of every ggweb kernel: the parameter block, the four storage bindings and
// element loaders. The Rust side (crate/webgpu/) prepends this file to each op's file.
//
// Every binding is a window of a tensor's buffer seen as u32 words. Offsets and strides
// are in *units* of the tensor's type: 4 bytes for f32/i32, 2 bytes for f16 and 1 byte
// for block-quantized types (whose blocks are not word-aligned: Q8_0 is 34 bytes).
// Bindings are all read_write so that a node may read and write the same buffer (the
// graph allocator packs intermediates into one buffer): WebGPU forbids a read-only and a
// writable binding of one buffer in the same dispatch. It also forbids two writable
// bindings whose ranges overlap, so operands whose windows overlap (an in-place op, two
// views of one tensor) share one binding: the pipeline constants B0..B2 say which binding
// holds src0..src2 (0..2: their own, 3: dst's), and every load goes through them.
// Fused kernels (crate/webgpu/fuse.rs) have up to four more operands, slots 4..7
// (bindings 5..8), which may be read or written; B4..B7 say which binding holds them.
// Slots 4 and 5 have strides (e_nb, f_nb), 6 and 7 one element stride each (g.z, g.w).

struct P {
    a_ne: vec4<u32>, a_nb: vec4<u32>,  // src0: ne, nb (units)
    b_ne: vec4<u32>, b_nb: vec4<u32>,  // src1
    c_ne: vec4<u32>, c_nb: vec4<u32>,  // src2
    d_ne: vec4<u32>, d_nb: vec4<u32>,  // dst
    off: vec4<u32>,                    // first unit of src0, src1, src2, dst in their windows
    misc: vec4<u32>,                   // x: work items, y/z: src0 rows [row0, row1) of this part, w: workgroups along x
    u: vec4<u32>,                      // op parameters
    f: vec4<f32>,
    e_nb: vec4<u32>,                   // slot 4: nb (units)
    f_nb: vec4<u32>,                   // slot 5: nb
    off2: vec4<u32>,                   // first unit of slots 4, 5, 6, 7 in their windows
    g: vec4<u32>,                      // x, y: more op parameters; z, w: slot 6 and 7's stride
}

@group(0) @binding(0) var<storage, read_write> s0: array<u32>;
@group(0) @binding(1) var<storage, read_write> s1: array<u32>;
@group(0) @binding(2) var<storage, read_write> s2: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;
@group(0) @binding(4) var<uniform> p: P;
@group(0) @binding(5) var<storage, read_write> s4: array<u32>;
@group(0) @binding(6) var<storage, read_write> s5: array<u32>;
@group(0) @binding(7) var<storage, read_write> s6: array<u32>;
@group(0) @binding(8) var<storage, read_write> s7: array<u32>;

// Linear workgroup index: large dispatches are folded into x * y (x <= 65535).
fn wg_linear(wg: vec3<u32>) -> u32 {
    return wg.y * p.misc.w + wg.x;
}

// Logical index -> (i0, i1, i2, i3) for shape `ne`.
fn unravel(i: u32, ne: vec4<u32>) -> vec4<u32> {
    let i0 = i % ne.x;
    let r1 = i / ne.x;
    let i1 = r1 % ne.y;
    let r2 = r1 / ne.y;
    let i2 = r2 % ne.z;
    return vec4<u32>(i0, i1, i2, r2 / ne.z);
}

fn at(idx: vec4<u32>, nb: vec4<u32>) -> u32 {
    return idx.x * nb.x + idx.y * nb.y + idx.z * nb.z + idx.w * nb.w;
}

override B0: u32 = 0u;
override B1: u32 = 1u;
override B2: u32 = 2u;
override B4: u32 = 4u;
override B5: u32 = 5u;
override B6: u32 = 6u;
override B7: u32 = 7u;

fn word(b: u32, i: u32) -> u32 {
    switch b {
        case 0u: { return s0[i]; }
        case 1u: { return s1[i]; }
        case 2u: { return s2[i]; }
        case 4u: { return s4[i]; }
        case 5u: { return s5[i]; }
        case 6u: { return s6[i]; }
        case 7u: { return s7[i]; }
        default: { return dst[i]; }
    }
}
// Stores word i of the operand whose binding is `b` (a slot's home).
fn put(b: u32, i: u32, v: u32) {
    switch b {
        case 0u: { s0[i] = v; }
        case 1u: { s1[i] = v; }
        case 2u: { s2[i] = v; }
        case 4u: { s4[i] = v; }
        case 5u: { s5[i] = v; }
        case 6u: { s6[i] = v; }
        case 7u: { s7[i] = v; }
        default: { dst[i] = v; }
    }
}
// Word i of src0, src1, src2.
fn w0(i: u32) -> u32 { return word(B0, i); }
fn w1(i: u32) -> u32 { return word(B1, i); }
fn w2(i: u32) -> u32 { return word(B2, i); }
fn w4(i: u32) -> u32 { return word(B4, i); }
fn w5(i: u32) -> u32 { return word(B5, i); }
fn w6(i: u32) -> u32 { return word(B6, i); }
fn w7(i: u32) -> u32 { return word(B7, i); }

fn ld0_f32(i: u32) -> f32 { return bitcast<f32>(w0(i)); }
fn ld1_f32(i: u32) -> f32 { return bitcast<f32>(w1(i)); }
fn ld2_f32(i: u32) -> f32 { return bitcast<f32>(w2(i)); }
fn ld4_f32(i: u32) -> f32 { return bitcast<f32>(w4(i)); }
fn ld5_f32(i: u32) -> f32 { return bitcast<f32>(w5(i)); }
fn ld6_f32(i: u32) -> f32 { return bitcast<f32>(w6(i)); }
fn ld7_f32(i: u32) -> f32 { return bitcast<f32>(w7(i)); }
// f16 element i (in halves); no shader-f16 needed.
fn ld0_f16(i: u32) -> f32 { return unpack2x16float(w0(i >> 1u))[i & 1u]; }
fn ld1_f16(i: u32) -> f32 { return unpack2x16float(w1(i >> 1u))[i & 1u]; }
fn ld2_f16(i: u32) -> f32 { return unpack2x16float(w2(i >> 1u))[i & 1u]; }
fn ld4_f16(i: u32) -> f32 { return unpack2x16float(w4(i >> 1u))[i & 1u]; }
fn st_f32(i: u32, v: f32) { dst[i] = bitcast<u32>(v); }

// Bytes of src0 (quantized blocks).
fn b0(o: u32) -> u32 { return (w0(o >> 2u) >> ((o & 3u) * 8u)) & 0xffu; }
fn i8_0(o: u32) -> i32 { return bitcast<i32>(b0(o) << 24u) >> 24u; }
// The f16 at an even byte offset.
fn h0(o: u32) -> f32 { return unpack2x16float(w0(o >> 2u) >> ((o & 2u) * 8u)).x; }

// tanh through exp(-2|u|): never overflows (the builtin tanh returns NaN for large |u|
// on some drivers) and keeps full relative precision away from 0.
fn tanh_stable(u: f32) -> f32 {
    let e = exp(-2.0 * abs(u));
    let t = (1.0 - e) / (1.0 + e);
    return select(t, -t, u < 0.0);
}

// GELU, tanh form (GPT-2's gelu_new), in f32: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
fn gelu_f32(x: f32) -> f32 {
    let u = 0.7978845608028654 * x * (1.0 + 0.044715 * x * x);
    return 0.5 * x * (1.0 + tanh_stable(u));
}

// -inf. Not a constant expression: WGSL compilers (Tint) reject a constant -inf.
fn neg_inf() -> f32 { return bitcast<f32>(0xff800000u + min(p.misc.x, 0u)); }
