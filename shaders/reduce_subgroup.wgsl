// The mat-vec kernel's reduction with subgroups (wgpu's SUBGROUP feature): subgroupAdd
// within each subgroup, then invocation 0 adds the subgroups' sums (64 / subgroup size of
// them): one barrier instead of the tree's seven.
struct Ids {
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) sli: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
}

var<workgroup> red: array<vec4<f32>, WG>;

// The sum of `v` over the workgroup's WG invocations, in invocation 0.
fn wg_sum(v: vec4<f32>, ids: Ids) -> vec4<f32> {
    let s = subgroupAdd(v);
    if (ids.sli == 0u) { red[ids.sg] = s; }
    workgroupBarrier();
    var t = vec4<f32>(0.0);
    if (ids.li == 0u) {
        for (var i = 0u; i < ids.nsg; i++) { t += red[i]; }
    }
    return t;
}
