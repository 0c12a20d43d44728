"""libcgrt through ctypes: finding the library, the public structs mirrored field by field, and the
signatures of the host API (core/include/cgrt/cgrt.h).

Every struct cgrt reads or fills starts with ``struct_size``; the mirrors below hold the fields of
this package's header version, so a newer library (with fields appended) reads and writes only
what they cover, and fields appended later stay invisible here until mirrored.
"""

import ctypes
import ctypes.util
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

MODE_COUNT = 4
PHASE_COUNT = 3
STATS_MAX_BUCKETS = 64


class CBuffer(Structure):
    _fields_ = [
        ("ptr", c_void_p),
        ("bytes", c_size_t),
        ("access", c_int),
        ("name", c_char_p),
    ]


class CCtx(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("rt", c_void_p),
        ("stream", c_void_p),
        ("comm", c_void_p),
        ("cp_size", c_int),
        ("phase", c_int),
        ("mode", c_int),
        ("microbatch", c_int),
        ("step", c_uint64),
        ("tokens", c_int64),
        ("padded_tokens", c_int64),
        ("num_sequences", c_int),
        ("padded_sequences", c_int),
        ("cu_seqlens", c_void_p),
        ("cu_seqlens_padded", c_void_p),
        ("user", c_void_p),
        ("buffers", POINTER(CBuffer)),
        ("num_buffers", c_size_t),
        ("cp_rank", c_int),
    ]


class CArgs(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("key", c_uint64),
        ("microbatch", c_int),
        ("buffers", POINTER(CBuffer)),
        ("num_buffers", c_size_t),
    ]


MODULE_FN = CFUNCTYPE(c_int, POINTER(CCtx), POINTER(CArgs), c_void_p)
STEP_FN = CFUNCTYPE(c_int, POINTER(CCtx), c_void_p)
LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)
CAPTURE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)
HOST_FN = CFUNCTYPE(None, c_void_p)


class CModuleDesc(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("kind", c_int),
        ("layer", c_int),
        ("forward", MODULE_FN),
        ("backward", MODULE_FN),
        ("user", c_void_p),
        # since 0.4
        ("no_cp_comm", c_int),
        ("stages_inputs", c_int),
    ]


class CStepDesc(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("phase", c_int),
        ("tokens", c_int64),
        ("seqlens", POINTER(c_int32)),
        ("num_sequences", c_int),
        ("cp_size", c_int),
        ("microbatches", c_int),
        ("buffers", POINTER(CBuffer)),
        ("num_buffers", c_size_t),
        ("prepare", STEP_FN),
        ("body", STEP_FN),
        ("user", c_void_p),
        # since 0.4
        ("stages_inputs", c_int),
    ]


class CStepReport(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("mode", c_int),
        ("padded_tokens", c_int64),
        ("calls_eager", c_uint32),
        ("calls_captured", c_uint32),
        ("calls_replayed", c_uint32),
        ("graphs_built", c_uint32),
        ("fallbacks", c_uint32),
        ("host_ns", c_uint64),
        # since 0.4
        ("copy_bytes", c_uint64),
    ]


class CStats(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("steps", c_uint64),
        ("steps_by_mode", c_uint64 * MODE_COUNT),
        ("calls_by_mode", c_uint64 * MODE_COUNT),
        ("captures", c_uint64),
        ("instantiations", c_uint64),
        ("updates", c_uint64),
        ("update_refusals", c_uint64),
        ("rebinds", c_uint64),
        ("evictions", c_uint64),
        ("fallbacks", c_uint64),
        ("live_graphs", c_uint64),
        # cgrt.h: a union of padding_tokens and its old name padded_tokens (one uint64_t); the
        # alias lives in Stats, not here, so that this mirror lists each C offset once.
        ("padding_tokens", c_uint64),
        ("capture_ns", c_uint64),
        ("instantiate_ns", c_uint64),
        ("graph_mem_used", c_uint64),
        ("graph_mem_reserved", c_uint64),
        # since 0.2: token buckets
        ("real_tokens", c_uint64),
        ("bucket_changes", c_uint64),
        ("num_buckets", c_uint32),
        ("buckets", c_int64 * STATS_MAX_BUCKETS),
        # since 0.3: graph memory
        ("graph_bytes", c_uint64),
        ("graph_pool_bytes", c_uint64),
        ("graph_exec_bytes", c_uint64),
        ("graph_pool_idle", c_uint64),
        ("graph_bytes_peak", c_uint64),
        ("graph_nodes", c_uint64),
        ("memory_budget", c_uint64),
        ("budget_eager", c_uint64),
        ("budget_evictions", c_uint64),
        # since 0.4: verify and diagnose, NCCL graph mixing, moved buffers
        ("verifications", c_uint64),
        ("verify_mismatches", c_uint64),
        ("verify_skipped", c_uint64),
        ("findings", c_uint64),
        ("comm_waits", c_uint64),
        ("rebind_copy_keys", c_uint64),
        ("rebind_eager_keys", c_uint64),
        ("copy_bytes", c_uint64),
        ("staged_bytes", c_uint64),
        ("rebind_variant_keys", c_uint64),
        # since 0.4: every backend runs every phase
        ("eager_phase_steps", c_uint64),
        # since 0.4: steps chosen by time ([local] by_time, [dynamic_cp] by_time)
        ("timed_steps", c_uint64),
        ("time_probe_steps", c_uint64),
        ("time_eager_steps", c_uint64),
        ("time_exact_steps", c_uint64),
        ("time_eager_counts", c_uint64),
        ("time_exact_counts", c_uint64),
        # since 0.4: fewer probes ([local] by_time)
        ("time_implied_counts", c_uint64),
        ("time_rare_refused", c_uint64),
        # since 0.4: a bound on the steps queued ahead of the device ([runtime] max_queued_steps)
        ("queue_waits", c_uint64),
        ("queue_wait_ns", c_uint64),
        ("sync_guard_waits", c_uint64),
        ("sync_guard_late", c_uint64),
        ("unrepeated_units", c_uint64),
    ]


class CCaptureHooks(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("begin", CAPTURE_FN),
        ("end", CAPTURE_FN),
        ("user", c_void_p),
        ("pool_allocator", c_char_p),
    ]


class CFinding(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int),
        ("broke_capture", c_int),
        ("call", c_char_p),
        ("result", c_int),
        ("result_name", c_char_p),
        ("what", c_char_p),
        ("step", c_uint64),
        ("caller", c_char_p),
        ("detail", c_char_p),
        ("count", c_uint32),
    ]


class COpenOptions(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("path", c_char_p),
        ("ini", c_char_p),
        ("ini_name", c_char_p),
        ("log", LOG_FN),
        ("log_user", c_void_p),
        # since 0.4
        ("stream", c_void_p),
    ]


class CBackendInfo(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("path", c_char_p),
        ("caps", c_uint64),
        ("phases", c_int * PHASE_COUNT),
    ]


class CGraphInfo(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("module", c_char_p),
        ("dir", c_int),
        ("microbatch", c_int),
        ("phase", c_int),
        ("shape", c_uint64),
        ("extra", c_uint64),
        ("bytes", c_uint64),
        ("pool_bytes", c_uint64),
        ("pool_used_bytes", c_uint64),
        ("exec_bytes", c_uint64),
        ("alloc_bytes", c_uint64),
        ("nodes", c_uint64),
        ("capture_ns", c_uint64),
        ("instantiate_ns", c_uint64),
        ("last_use", c_uint64),
        ("replays", c_uint64),
    ]


GRAPH_FN = CFUNCTYPE(c_int, c_void_p, POINTER(CGraphInfo))
FIGURE_FN = CFUNCTYPE(None, c_void_p, c_char_p, ctypes.c_uint64)


class CReleaseReport(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("graphs", c_uint64),
        ("bytes", c_uint64),
        ("nodes", c_uint64),
        ("pool_reserved_before", c_uint64),
        ("pool_reserved_after", c_uint64),
    ]


# The structs the layout test compares with the C compiler's view (tests/python/layout.c).
MIRRORS = {
    "cgrt_buffer": CBuffer,
    "cgrt_ctx": CCtx,
    "cgrt_args": CArgs,
    "cgrt_module_desc": CModuleDesc,
    "cgrt_step_desc": CStepDesc,
    "cgrt_step_report": CStepReport,
    "cgrt_stats": CStats,
    "cgrt_open_options": COpenOptions,
    "cgrt_capture_hooks": CCaptureHooks,
    "cgrt_finding": CFinding,
    "cgrt_backend_info": CBackendInfo,
    "cgrt_graph_info": CGraphInfo,
    "cgrt_release_report": CReleaseReport,
}

_SONAMES = ("libcgrt.so.0", "libcgrt.so")


class LibraryNotFound(OSError):
    """libcgrt could not be found or loaded; the message lists every place tried."""


def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def _installed_libdirs():
    """Where `cmake --install` put libcgrt, when it installed this package too (_install.py)."""
    try:
        from . import _install  # written by cmake --install

        return [_install.LIBDIR]
    except ImportError:
        return []


def _build_tree_libdirs():
    """The build trees of the checkout this package sits in (python/cgrt inside the repository)."""
    repo = os.path.dirname(os.path.dirname(_package_dir()))
    if not os.path.isfile(os.path.join(repo, "core", "include", "cgrt", "cgrt.h")):
        return []
    found = []
    try:
        names = sorted(os.listdir(repo))
    except OSError:
        return []
    for name in names:
        if name.startswith("build"):
            lib = os.path.join(repo, name, "lib")
            if any(os.path.exists(os.path.join(lib, s)) for s in _SONAMES):
                found.append(lib)
    # build/ first (what the README builds), then the others, most recently built first.
    found.sort(key=lambda d: (os.path.basename(os.path.dirname(d)) != "build", -os.path.getmtime(d)))
    return found


def candidates():
    """Every library path find_library() tries, in order, with where each comes from."""
    out = []
    env = os.environ.get("CGRT_LIBRARY")
    if env:
        out.append(("CGRT_LIBRARY", env))
        return out
    for d in _installed_libdirs():
        for s in _SONAMES:
            out.append(("installed prefix", os.path.join(d, s)))
    for d in _build_tree_libdirs():
        for s in _SONAMES:
            out.append(("build tree", os.path.join(d, s)))
    found = ctypes.util.find_library("cgrt")
    if found:
        out.append(("system library path", found))
    for s in _SONAMES:
        out.append(("dynamic loader search", s))
    return out


def load_library():
    """Loads libcgrt: CGRT_LIBRARY (a path) if set, else the prefix this package was installed
    with, else the build tree of this checkout, else the system's library path."""
    tried = []
    for where, path in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({where}: no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({where}: {e})")
            continue
        _declare(lib)
        return lib, path
    raise LibraryNotFound(
        "libcgrt not found; tried: " + "; ".join(tried) + ". Set CGRT_LIBRARY to the path of "
        "libcgrt.so (e.g. build/lib/libcgrt.so after building), or install cgrt "
        "(cmake --install) so the dynamic loader finds it."
    )


# Entry points an older libcgrt lacks; the package loads it all the same (see has()).
OPTIONAL = (
    "cgrt_config_get",
    "cgrt_log_message",
    "cgrt_set_capture_hooks",
    "cgrt_set_capture_hooks_ex",
    "cgrt_findings_count",
    "cgrt_finding_get",
    "cgrt_finding_kind_name",
    "cgrt_findings_clear",
    "cgrt_backend_info_get",
    "cgrt_graph_list",
    "cgrt_release_graphs_ex",
    "cgrt_module_release_key",
    "cgrt_alloc_async",
    "cgrt_free_async",
)


def has(lib, name):
    """Whether the loaded library has entry point `name` (declared by _declare)."""
    fn = getattr(lib, name, None)
    return fn is not None and getattr(fn, "argtypes", None) is not None


def _declare(lib):
    R = c_void_p  # cgrt_runtime *
    sig = {
        "cgrt_version": (c_char_p, []),
        "cgrt_open": (c_int, [POINTER(R), c_char_p]),
        "cgrt_open_string": (c_int, [POINTER(R), c_char_p]),
        "cgrt_open_ex": (c_int, [POINTER(R), POINTER(COpenOptions)]),
        "cgrt_close": (c_int, [R]),
        "cgrt_last_error": (c_char_p, [R]),
        "cgrt_strerror": (c_char_p, [c_int]),
        "cgrt_set_log": (c_int, [R, LOG_FN, c_void_p]),
        "cgrt_stream": (c_void_p, [R]),
        "cgrt_backend_name": (c_char_p, [R]),
        "cgrt_config_get": (c_int, [R, c_char_p, c_char_p, c_char_p, c_size_t]),
        "cgrt_log_message": (c_int, [R, c_int, c_char_p]),
        "cgrt_module_register": (c_int, [R, POINTER(CModuleDesc), POINTER(c_void_p)]),
        "cgrt_step": (c_int, [R, POINTER(CStepDesc), POINTER(CStepReport)]),
        "cgrt_forward": (c_int, [R, c_void_p, POINTER(CCtx), POINTER(CArgs)]),
        "cgrt_backward": (c_int, [R, c_void_p, POINTER(CCtx), POINTER(CArgs)]),
        "cgrt_enqueue_host": (c_int, [POINTER(CCtx), HOST_FN, c_void_p]),
        "cgrt_synchronize": (c_int, [R]),
        "cgrt_device_synchronize": (c_int, [R]),
        "cgrt_release_graphs": (c_int, [R]),
        "cgrt_release_graphs_ex": (c_int, [R, POINTER(CReleaseReport)]),
        "cgrt_module_release_key": (c_int, [R, c_void_p, c_uint64, POINTER(c_size_t)]),
        "cgrt_graph_list": (c_int, [R, GRAPH_FN, c_void_p]),
        "cgrt_backend_info_get": (c_int, [R, POINTER(CBackendInfo)]),
        "cgrt_backend_figures": (c_int, [R, FIGURE_FN, c_void_p]),
        "cgrt_alloc_async": (c_int, [POINTER(CCtx), c_size_t, POINTER(c_void_p)]),
        "cgrt_free_async": (c_int, [POINTER(CCtx), c_void_p]),
        "cgrt_stats_get": (c_int, [R, POINTER(CStats)]),
        "cgrt_stats_format": (c_int, [POINTER(CStats), c_int, ctypes.c_char_p, c_size_t]),
        "cgrt_set_world_comm": (c_int, [R, c_void_p]),
        "cgrt_phase_name": (c_char_p, [c_int]),
        "cgrt_mode_name": (c_char_p, [c_int]),
        "cgrt_kind_name": (c_char_p, [c_int]),
        "cgrt_set_capture_hooks": (c_int, [R, CAPTURE_FN, CAPTURE_FN, c_void_p]),
        "cgrt_set_capture_hooks_ex": (c_int, [R, POINTER(CCaptureHooks)]),
        "cgrt_findings_count": (c_int, [R, POINTER(c_size_t)]),
        "cgrt_finding_get": (c_int, [R, c_size_t, POINTER(CFinding)]),
        "cgrt_finding_kind_name": (c_char_p, [c_int]),
        "cgrt_findings_clear": (c_int, [R]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name, None)
        if fn is None:
            if name in OPTIONAL:
                continue  # an older library: the method that needs it says so when called
            raise LibraryNotFound(f"{lib._name} has no symbol {name}: not a libcgrt of this version")
        fn.restype = restype
        fn.argtypes = argtypes
