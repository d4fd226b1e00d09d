// Anchor translation unit for the precompiled header target dtrain_pch.
namespace dtrain::detail {
int pch_anchor() { return 0; }
}  // namespace dtrain::detail
