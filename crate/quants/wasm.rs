use crate::types::GgmlType;
pub fn available() -> bool {
    false
}
pub fn vec_dot(_ty: GgmlType, _n: usize, _a: &[u8], _b: &[u8]) -> Option<f32> {
    None
}
