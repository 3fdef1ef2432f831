// The mat-vec kernel's reduction without subgroups: a tree in workgroup memory.
struct Ids {
    @builtin(local_invocation_index) li: u32,
}

var<workgroup> red: array<vec4<f32>, WG>;

// The sum of `v` over the workgroup's WG invocations, in invocation 0.
fn wg_sum(v: vec4<f32>, ids: Ids) -> vec4<f32> {
    let li = ids.li;
    red[li] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (li < s) { red[li] += red[li + s]; }
        workgroupBarrier();
    }
    return red[0];
}
