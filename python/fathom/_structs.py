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


# C struct name -> mirror; the layout test walks this table.
MIRRORED = {
    "fathom_segment_view": SegmentView,
    "fathom_method": Method,
    "fathom_source_info": SourceInfo,
    "fathom_eval_config": EvalConfig,
    "fathom_method_result": MethodResult,
}
