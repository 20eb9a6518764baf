"""ctypes mirrors of the structs in include/fathom.h.

Each class's ``_fields_`` must follow the C declaration exactly; the library
exports the compiled layout (``fathom_abi_layout``) and
python/tests/test_layout.py checks every class in ``MIRRORED`` against it.
C enums are ``int`` on every ABI libfathom builds for.
"""
import ctypes as C

# typedef void (*fathom_progress_fn)(void *user, uint64_t done, uint64_t total);
PROGRESS_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_uint64, C.c_uint64)


class SegmentView(C.Structure):
    _fields_ = [
        ("planes", C.c_void_p),  # const uint64_t * [dim][4][segment_blocks]
        ("scales", C.c_void_p),  # const uint16_t * [dim][segment_blocks], fp16
        ("first_token", C.c_uint64),
        ("blocks", C.c_uint32),
        ("tokens", C.c_uint32),
    ]


class Method(C.Structure):
    _fields_ = [
        ("kind", C.c_int),  # fathom_method_kind
        ("param", C.c_uint32),
        ("name", C.c_char * 32),
    ]


class SourceInfo(C.Structure):
    _fields_ = [
        ("model", C.c_char * 64),
        ("layers", C.c_uint32),
        ("q_heads", C.c_uint32),
        ("kv_heads", C.c_uint32),
        ("dim", C.c_uint32),
        ("tokens", C.c_uint64),
        ("positions", C.c_uint32),
        ("first_query", C.c_uint64),
    ]


class EvalConfig(C.Structure):
    _fields_ = [
        ("k", C.c_uint32),
        ("calib", C.c_void_p),  # const fathom_source *
        ("layer_budget", C.c_int),  # fathom_layer_budget
        ("threads", C.c_uint32),
        ("max_positions", C.c_uint32),
        ("planes_as_keys", C.c_int),
        ("progress", PROGRESS_FN),
        ("progress_user", C.c_void_p),
    ]


class MethodResult(C.Structure):
    _fields_ = [
        ("name", C.c_char * 32),
        ("bits_per_token", C.c_double),
        ("scan_bytes_per_step", C.c_double),
        ("row_bytes_per_step", C.c_double),
        ("rel_error", C.c_double),
        ("rel_error_stderr", C.c_double),
        ("selection_ratio", C.c_double),
    ]


# include/fathom_cuda.h (the KV tier), for fathom.tier
u32, u64, ptr = C.c_uint32, C.c_uint64, C.c_void_p


class TierShape(C.Structure):
    _fields_ = [("layers", u32), ("kv_heads", u32), ("group", u32), ("dim", u32), ("segment_blocks", u32),
                ("max_sessions", u32), ("max_tokens", u64)]


class TierUsage(C.Structure):
    _fields_ = [("length", u64), ("capacity", u64), ("segments", u32), ("shared_segments", u32), ("bytes", u64),
                ("exclusive_bytes", u64)]


class TierView(C.Structure):
    _fields_ = [("planes", ptr), ("scales", ptr), ("kv", ptr), ("first_token", u64), ("segment_blocks", u32)]


class StepArgs(C.Structure):
    _fields_ = [("layer", u32), ("sessions", ptr), ("batch", u32), ("capacity_tokens", u64), ("k", u32),
                ("sink", u32), ("local", u32), ("budget", u32), ("scale", C.c_float), ("queries", ptr),
                ("out", ptr), ("lse", ptr), ("selected", ptr), ("selected_count", ptr), ("depths", ptr),
                ("union_count", ptr), ("workspace", ptr), ("workspace_bytes", C.c_size_t), ("fixed_depths", ptr),
                ("cache_bytes", ptr), ("ahead_bytes", ptr)]


class TierCacheConfig(C.Structure):
    _fields_ = [("plane_bytes", u64), ("tokens", u64), ("row_bytes", u64), ("window", u32), ("row_ways", u32),
                ("ahead_lines", u32), ("ahead_rows", u32)]


# C struct name -> mirror; the layout test walks this table.
MIRRORED = {
    "fathom_segment_view": SegmentView,
    "fathom_method": Method,
    "fathom_source_info": SourceInfo,
    "fathom_eval_config": EvalConfig,
    "fathom_method_result": MethodResult,
}

# include/fathom_cuda.h's structs: libfathom exports no layout for them (it is
# built without CUDA headers); the layout test compiles a probe against the header.
CUDA_MIRRORED = {
    "fathom_cuda_tier_shape": TierShape,
    "fathom_cuda_tier_usage": TierUsage,
    "fathom_cuda_tier_view": TierView,
    "fathom_cuda_tier_step_args": StepArgs,
    "fathom_cuda_tier_cache_config": TierCacheConfig,
}
