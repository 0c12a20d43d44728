"""cgrt from Python: a CUDA graph runtime whose strategy (eager, per-layer graphs, whole-step
graphs...) is chosen by an INI file, over libcgrt through ctypes (no compiler needed).

    import cgrt
    with cgrt.Runtime.from_file("conf/local.ini") as rt:   # or Runtime.from_ini(text)
        m = rt.register("layer0.mlp", "mlp", forward=fwd, layer=0)
        report = rt.step("infer", tokens=5, prepare=prepare, body=body)
        print(rt.stats())

Callbacks get a `Ctx` (stream, mode, padded_tokens...) and, for modules, an `ArgsView`; they
enqueue device work on ``ctx.stream`` (or host functions with ``ctx.enqueue_host``) and never
synchronize. Every failure raises `cgrt.Error` with the runtime's sentence and code; a callback
that raises fails its call with an error naming the module, and the exception is chained.
`cgrt.torch` puts torch.nn.Modules under cgrt.
"""

import ctypes
import enum
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

from . import _check, _lib
from ._lib import LibraryNotFound

__all__ = [
    "Access",
    "Args",
    "ArgsView",
    "BackendCaps",
    "BackendInfo",
    "Buffer",
    "Ctx",
    "Direction",
    "ElementType",
    "Error",
    "Finding",
    "GraphInfo",
    "Kind",
    "LibraryNotFound",
    "LogLevel",
    "Mode",
    "Module",
    "Phase",
    "PhaseRun",
    "ReleaseReport",
    "Runtime",
    "Status",
    "Stats",
    "StepReport",
    "library_path",
    "version",
]

__version__ = "0.4.0"


class Status(enum.IntEnum):
    OK = 0
    INVAL = -1
    NOMEM = -2
    IO = -3
    CONFIG = -4
    NOTFOUND = -5
    BACKEND = -6
    NODEV = -7
    DEVICE = -8
    CAPTURE = -9
    UPDATE = -10
    REBIND = -11
    CAPACITY = -12
    CALLBACK = -13
    STATE = -14
    UNSUPPORTED = -15
    NOTREADY = -16
    VERIFY = -17


class Phase(enum.IntEnum):
    TRAIN = 0
    EVAL = 1
    INFER = 2


class Mode(enum.IntEnum):
    EAGER = 0
    WARMUP = 1
    CAPTURE = 2
    REPLAY = 3


class Kind(enum.IntEnum):
    ATTN = 0
    MLP = 1
    MOE = 2
    MOE_ROUTER = 3
    MOE_PREPROCESS = 4
    MAMBA = 5
    OTHER = 6


class Access(enum.IntEnum):
    IN = 1
    OUT = 2
    INOUT = 3


class ElementType(enum.IntEnum):
    """The element type a buffer may declare (cgrt_access's CGRT_F32...: Buffer.dtype). Only
    `[cuda_graph] verify` reads it: outputs of a float type compare within verify_tolerance
    ulps, a buffer without a type compares bitwise."""

    F32 = 0x10
    F16 = 0x20
    BF16 = 0x30
    F64 = 0x40


_ACCESS_DIRECTION = 0x0F  # CGRT_ACCESS_DIRECTION
_ACCESS_TYPE = 0xF0  # CGRT_ACCESS_TYPE


class Direction(enum.IntEnum):
    """cgrt_direction: of a module call (GraphInfo.dir)."""

    FORWARD = 0
    BACKWARD = 1


class LogLevel(enum.IntEnum):
    """cgrt_log_level: what a log sink receives and Runtime.log() takes."""

    OFF = 0
    ERROR = 1
    WARN = 2
    INFO = 3
    DEBUG = 4


class PhaseRun(enum.IntEnum):
    """cgrt_phase_run: what the configured backend does with the steps of one phase
    (BackendInfo.phases)."""

    EAGER = 0  # the backend runs them eagerly, every step (impl = none)
    GRAPHS = 1  # the backend captures and replays graphs for them, its way
    CORE_EAGER = 2  # the backend has no form for the phase: cgrt runs them eagerly itself,
    # counted in Stats.eager_phase_steps (transformer_engine's infer steps)


class BackendCaps(enum.IntFlag):
    """CGRT_BACKEND_*: what a backend can do (BackendInfo.caps), as its table declares it. A
    newer library may set bits this package does not name: they are kept, ignore them."""

    TRAINING = 1 << 0  # a form of its own for train and eval steps
    INFERENCE = 1 << 1  # a form of its own for infer steps
    BACKWARD = 1 << 2  # handles backward module calls
    GRAPHS = 1 << 3  # builds graphs (otherwise eager only)
    MULTI_GPU = 1 << 4  # designed for several ranks
    COMM = 1 << 5  # needs the host's world communicator (Runtime.set_world_comm)
    ADAPTIVE = 1 << 6  # follows [inference] buckets = adaptive
    BUCKETS = 1 << 7  # pads infer steps up to the [inference] token buckets
    WHOLE_STEP = 1 << 8  # graphs the whole step (no host read inside it)


def _known(cls, value):
    """`value` as a member of enum `cls`, or the int itself when a newer library sends a value
    this package does not know (never an exception for what cgrt reports)."""
    try:
        return cls(value)
    except ValueError:
        return value


def _enum(cls, value, what):
    """An enum member from itself, its int value, or its name ("infer", "moe_router"); else
    ValueError (TypeError for a value neither an integer nor a str) naming `what`."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            names = " ".join(m.name.lower() for m in cls)
            raise ValueError(f"{what} {value!r} is not one of: {names}") from None
    v = _check.integer(value, what, "int")
    try:
        return cls(v)
    except ValueError:
        names = " ".join(f"{m.name.lower()}={m.value}" for m in cls)
        raise ValueError(f"{what} {v} is not one of: {names}") from None


# ---------------------------------------------------------------- the library

_LIB = None
_LIB_PATH = None
_LIB_LOCK = threading.Lock()


def _lib_handle():
    global _LIB, _LIB_PATH
    if _LIB is None:
        with _LIB_LOCK:
            if _LIB is None:
                _LIB, _LIB_PATH = _lib.load_library()
    return _LIB


def library_path() -> str:
    """The path of the libcgrt this package loaded (loading it if not yet done)."""
    _lib_handle()
    return _LIB_PATH


def version() -> str:
    """libcgrt's version string, e.g. "0.4.0"."""
    return _lib_handle().cgrt_version().decode()


# ---------------------------------------------------------------- errors


class Error(Exception):
    """A failed cgrt call: `code` (a Status), `message` (the runtime's sentence naming the module,
    option, file:line or buffer at fault) and, when a Python callback raised, `exception`.

    str() says each sentence once and each code once: the message, then what `exception` adds
    (a cgrt.Error from a call inside the callback: its sentence when the message does not already
    hold it, and its code when it differs), then [CGRT_E_<code>]."""

    def __init__(self, code, message, exception=None):
        try:
            code = Status(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        self.exception = exception
        text = message or _strerror(code)
        if isinstance(exception, Error):
            # cgrt keeps the sentence of a call that failed inside a callback as the step's or
            # the call's own: said already, then.
            inner = exception._detail
            if exception.code != code:
                inner = f"{inner} [{_code_name(exception.code)}]"
            if exception._detail not in text:
                text = f"{text}: {inner}"
        elif exception is not None:
            text = f"{text}: {type(exception).__name__}: {exception}"
        self._detail = text
        super().__init__(f"{text} [{_code_name(code)}]")


def _code_name(code):
    return "CGRT_E_" + (code.name if isinstance(code, Status) else str(code))


def _strerror(code):
    try:
        return _lib_handle().cgrt_strerror(int(code)).decode()
    except Exception:  # noqa: BLE001 - only for messages
        return f"error {code}"


# ---------------------------------------------------------------- values passed to callbacks


@dataclass(frozen=True)
class Buffer:
    """Memory a step or a module call reads and writes: a device pointer on the cuda driver, host
    memory on the host driver. `name` only appears in messages. `ptr` and `bytes` are integers in
    the range of the C fields (void * and size_t: never negative), `access` an Access, its value
    or its name; `dtype` (an ElementType, its value or its name, "f32"...) declares the element
    type for `[cuda_graph] verify` (CGRT_ACCESS_TYPED); anything else raises ValueError or
    TypeError here."""

    ptr: int
    bytes: int
    access: Access = Access.INOUT
    name: Optional[str] = None
    dtype: Optional[ElementType] = None

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: the checked values replace the given ones
        set_(self, "ptr", _check.integer(self.ptr, "Buffer ptr", "void *"))
        set_(self, "bytes", _check.integer(self.bytes, "Buffer bytes", "size_t"))
        set_(self, "access", _enum(Access, self.access, "Buffer access"))
        if self.name is not None:
            _check.c_string(self.name, "Buffer name")
        if self.dtype is not None:
            set_(self, "dtype", _enum(ElementType, self.dtype, "Buffer dtype"))


def _c_buffers(buffers):
    """A ctypes array of cgrt_buffer for a sequence of Buffer or (ptr, bytes[, access[, name]])."""
    n = len(buffers)
    arr = (_lib.CBuffer * n)()
    for i, b in enumerate(buffers):
        if not isinstance(b, Buffer):
            b = Buffer(*b)  # checks its fields
        arr[i].ptr = b.ptr
        arr[i].bytes = b.bytes
        arr[i].access = int(b.access) | (int(b.dtype) if b.dtype is not None else 0)
        arr[i].name = _check.c_string(b.name, "Buffer name") if b.name else None
    return arr


class Args:
    """The arguments of one module call: `key` (the host's signature of the call's shape: calls
    with different keys never share a graph), `microbatch`, and the buffers it reads and writes.
    Build one and reuse it while the call's buffers stay the same. Read-only once built (what
    cgrt reads is filled here): build another for other values. `key` is a uint64_t,
    `microbatch` an int: other values raise ValueError."""

    __slots__ = ("_key", "_microbatch", "_buffers", "_c", "_arr", "_ref")

    def __init__(self, key: int = 0, microbatch: int = 0, buffers: Sequence = ()):
        self._key = _check.integer(key, "Args key", "uint64_t")
        self._microbatch = _check.integer(microbatch, "Args microbatch", "int")
        self._buffers = tuple(b if isinstance(b, Buffer) else Buffer(*b) for b in buffers)
        self._arr = _c_buffers(self._buffers)
        c = _lib.CArgs()
        c.struct_size = ctypes.sizeof(_lib.CArgs)
        c.key = self._key
        c.microbatch = self._microbatch
        c.buffers = ctypes.cast(self._arr, ctypes.POINTER(_lib.CBuffer)) if self._buffers else None
        c.num_buffers = len(self._buffers)
        self._c = c
        self._ref = ctypes.pointer(c)

    key = property(lambda self: self._key, doc="The call's key (uint64_t).")
    microbatch = property(lambda self: self._microbatch, doc="The call's microbatch (int).")
    buffers = property(lambda self: self._buffers, doc="The call's buffers, a tuple of Buffer.")


def _view_buffers(ptr, n):
    if not n or not ptr:
        return ()
    out = []
    for i in range(n):
        b = ptr[i]
        t = b.access & _ACCESS_TYPE  # a type this version does not know compares bitwise: none
        dtype = ElementType(t) if t in ElementType._value2member_map_ else None
        name = b.name.decode() if b.name else None
        out.append(Buffer(b.ptr or 0, b.bytes, Access(b.access & _ACCESS_DIRECTION), name, dtype))
    return tuple(out)


def _callback_name(module, label):
    """ "module 'm' forward", "the step's body": the callback a view was handed to."""
    return f"module '{module.name}' {label}" if module is not None else f"the step's {label}"


class Ctx:
    """What cgrt tells a callback about the work at hand. Valid only during the callback it was
    passed to (cgrt owns the memory): any use after that raises Error(STATE); copy what you
    keep."""

    __slots__ = ("_ptr", "_c", "_rt", "_module", "_label")

    def __init__(self, rt, ptr, module=None, label="body"):
        self._rt = rt
        self._ptr = ptr
        self._c = ptr.contents
        self._module = module
        self._label = label

    def _live(self):
        c = self._c
        if c is None:
            raise Error(
                Status.STATE,
                f"ctx of {_callback_name(self._module, self._label)} is valid only during the "
                "callback: copy what you keep",
            )
        return c

    @property
    def runtime(self):
        self._live()
        return self._rt

    @property
    def stream(self) -> int:
        """The stream to enqueue work on (a cudaStream_t on the cuda driver), as an int."""
        return self._live().stream or 0

    @property
    def comm(self) -> int:
        return self._live().comm or 0

    @property
    def cp_size(self) -> int:
        return self._live().cp_size

    @property
    def cp_rank(self) -> int:
        return self._live().cp_rank

    @property
    def phase(self) -> Phase:
        return Phase(self._live().phase)

    @property
    def mode(self) -> Mode:
        return Mode(self._live().mode)

    @property
    def microbatch(self) -> int:
        return self._live().microbatch

    @property
    def step(self) -> int:
        return self._live().step

    @property
    def tokens(self) -> int:
        return self._live().tokens

    @property
    def padded_tokens(self) -> int:
        return self._live().padded_tokens

    @property
    def num_sequences(self) -> int:
        return self._live().num_sequences

    @property
    def padded_sequences(self) -> int:
        return self._live().padded_sequences

    @property
    def cu_seqlens(self) -> int:
        """Device address of the step's cumulative actual sequence lengths (int32), 0 if none."""
        return self._live().cu_seqlens or 0

    @property
    def cu_seqlens_padded(self) -> int:
        """Device address of the cumulative padded sequence lengths (int32), 0 if none."""
        return self._live().cu_seqlens_padded or 0

    def alloc_async(self, nbytes: int) -> int:
        """Stream-ordered device memory for this callback's temporaries (cudaMallocAsync on
        ctx.stream; host memory on the host driver), as an address. Allocated and freed inside a
        captured call it belongs to the graph and is counted in its GraphInfo.alloc_bytes. Free it
        with free_async on the same ctx, in the same callback when the call is captured."""
        n = _check.integer(nbytes, "alloc_async bytes", "size_t")
        self._rt._handle()
        self._live()
        lib = self._rt._lib
        if not _lib.has(lib, "cgrt_alloc_async"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_alloc_async")
        ptr = ctypes.c_void_p()
        rc = lib.cgrt_alloc_async(self._ptr, n, ctypes.byref(ptr))
        if rc != 0:
            raise self._rt._fail(rc)
        return ptr.value or 0

    def free_async(self, ptr: int) -> None:
        """Frees what alloc_async gave, in stream order on ctx.stream."""
        p = _check.integer(ptr, "free_async ptr", "void *")
        self._rt._handle()
        self._live()
        lib = self._rt._lib
        if not _lib.has(lib, "cgrt_free_async"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_free_async")
        rc = lib.cgrt_free_async(self._ptr, p or None)
        if rc != 0:
            raise self._rt._fail(rc)

    @property
    def buffers(self) -> Tuple[Buffer, ...]:
        """The step's static buffers as the body must address them (private copies under
        rebind = copy), copied: the tuple stays valid after the callback."""
        c = self._live()
        return _view_buffers(c.buffers, c.num_buffers)

    def enqueue_host(self, fn: Callable[[], None]) -> None:
        """Enqueues `fn()` on the stream (cudaLaunchHostFunc on the cuda driver): it runs after the
        work before it and is recorded like a kernel when the call is captured, so a replay runs
        it again. It must not call cgrt or CUDA (a cgrt call from it raises Error(STATE)). An
        exception it raises is reported by the next Runtime.synchronize()."""
        self._rt._enqueue_host(self, fn)


class ArgsView:
    """The arguments a module callback was called with: key, microbatch, buffers (the addresses
    the call must use: private copies under rebind = copy). Valid only during the callback, like
    its Ctx: any use after that raises Error(STATE); `buffers` returns copies to keep."""

    __slots__ = ("_ptr", "_c", "_module", "_label")

    def __init__(self, ptr, module=None, label="forward"):
        self._ptr = ptr
        self._c = ptr.contents
        self._module = module
        self._label = label

    def _live(self):
        c = self._c
        if c is None:
            raise Error(
                Status.STATE,
                f"args of {_callback_name(self._module, self._label)} are valid only during the "
                "callback: copy what you keep",
            )
        return c

    @property
    def key(self) -> int:
        return self._live().key

    @property
    def microbatch(self) -> int:
        return self._live().microbatch

    @property
    def num_buffers(self) -> int:
        return self._live().num_buffers

    def buffer_ptr(self, i: int) -> int:
        """The address of buffer `i` (negative counts from the end, as for a tuple)."""
        c = self._live()
        n = c.num_buffers
        j = _check.integer(i, "buffer_ptr index", "int64_t")
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(
                f"args of {_callback_name(self._module, self._label)} have {n} buffer(s): "
                f"buffer_ptr({i}) is out of range"
            )
        return c.buffers[j].ptr or 0

    @property
    def buffers(self) -> Tuple[Buffer, ...]:
        """The call's buffers, copied: the tuple stays valid after the callback."""
        c = self._live()
        return _view_buffers(c.buffers, c.num_buffers)


@dataclass(frozen=True)
class StepReport:
    mode: Mode
    padded_tokens: int
    calls_eager: int
    calls_captured: int
    calls_replayed: int
    graphs_built: int
    fallbacks: int
    host_ns: int
    copy_bytes: int  # bytes its replays copied into and out of private copies (since 0.4)


@dataclass(frozen=True)
class Stats:
    """A runtime's counters (cgrt_stats). The tuples by mode are indexed by Mode."""

    steps: int
    steps_by_mode: Tuple[int, ...]
    calls_by_mode: Tuple[int, ...]
    captures: int
    instantiations: int
    updates: int
    update_refusals: int
    rebinds: int
    evictions: int
    fallbacks: int
    live_graphs: int
    padding_tokens: int  # tokens added by padding to buckets, summed over steps
    capture_ns: int
    instantiate_ns: int
    graph_mem_used: int
    graph_mem_reserved: int
    real_tokens: int
    bucket_changes: int
    num_buckets: int
    buckets: Tuple[int, ...]
    graph_bytes: int
    graph_pool_bytes: int
    graph_exec_bytes: int
    graph_pool_idle: int
    graph_bytes_peak: int
    graph_nodes: int
    memory_budget: int
    budget_eager: int
    budget_evictions: int
    verifications: int
    verify_mismatches: int
    verify_skipped: int
    findings: int
    comm_waits: int
    rebind_copy_keys: int
    rebind_eager_keys: int
    copy_bytes: int
    staged_bytes: int
    rebind_variant_keys: int
    eager_phase_steps: int  # steps cgrt ran eagerly itself (PhaseRun.CORE_EAGER)
    # steps chosen by time ([local] by_time): steps timed on the device, padded steps run
    # eagerly to measure eager, or served eagerly / at an exact-size bucket because their padded
    # replay was measured slower; the token counts served those two ways now. [dynamic_cp]
    # by_time fills the same fields, a cp size standing for a token count (no exact-size buckets);
    # its rounds are in Runtime.backend_figures()
    timed_steps: int
    time_probe_steps: int
    time_eager_steps: int
    time_exact_steps: int
    time_eager_counts: int
    time_exact_counts: int
    # [local] by_time: token counts decided by another count's measurement in their bucket (no
    # probes of their own), and counts served eagerly refused an exact-size bucket as rare
    time_implied_counts: int
    time_rare_refused: int
    # [runtime] max_queued_steps: steps whose issue first waited for an earlier step to finish on
    # the device (the host was that many steps ahead), and the host time those waits took
    queue_waits: int
    queue_wait_ns: int
    # [runtime] sync_guard, for this runtime's device and the whole process: raw device
    # synchronizes of any thread that waited for a capture, and those that went ahead when the
    # bound ran out (the capture's work may wait for that thread)
    sync_guard_waits: int
    sync_guard_late: int
    # modules (one per direction) and step phases whose keys never repeated: their last 64
    # graphed calls each came with a key not seen before, so nothing of them is captured (cgrt
    # says so once each); in cgrt.torch, input shapes that change on every call
    unrepeated_units: int

    @property
    def padded_tokens(self) -> int:
        """The old name of `padding_tokens`, kept readable for callers written before 0.4 (cgrt.h
        keeps it as an alias in a union). Elsewhere padded_tokens (Ctx, StepReport) is the size a
        step ran at: read padding_tokens."""
        return self.padding_tokens


@dataclass(frozen=True)
class BackendInfo:
    """The configured backend (cgrt_backend_info): `name` ("local"), `path` (the shared object it
    was loaded from), `caps` (BackendCaps) and `phases`, a dict Phase -> PhaseRun saying what
    steps of each phase get. Every phase runs under every backend: a phase the backend has no form
    for runs eagerly in cgrt (PhaseRun.CORE_EAGER), so a host that swaps `impl` never meets
    Error(UNSUPPORTED) for a phase."""

    name: str
    path: str
    caps: BackendCaps
    phases: Dict[Phase, PhaseRun]


@dataclass(frozen=True)
class GraphInfo:
    """One live graph (cgrt_graph_info), copied while cgrt listed it: `name` for tables ("layer3
    fwd, infer, key 64"), `module` (None for a graph of a whole step body), `dir`, `microbatch`,
    `phase`, `shape` (the call's key or the step's token bucket), `extra` (backend-defined: a
    bucket, a cp size...), and what it cost: `bytes` (= pool_bytes + exec_bytes), `pool_bytes`,
    `pool_used_bytes`, `exec_bytes`, `alloc_bytes`, `nodes`, `capture_ns`, `instantiate_ns`;
    `last_use` (the last step that captured or replayed it) and `replays`. Fields a library older
    than this package does not fill read as 0 (None for strings)."""

    name: Optional[str]
    module: Optional[str]
    dir: Direction
    microbatch: int
    phase: Phase
    shape: int
    extra: int
    bytes: int
    pool_bytes: int
    pool_used_bytes: int
    exec_bytes: int
    alloc_bytes: int
    nodes: int
    capture_ns: int
    instantiate_ns: int
    last_use: int
    replays: int


@dataclass(frozen=True)
class ReleaseReport:
    """What Runtime.release_graphs() freed (cgrt_release_report): `graphs` (executables), their
    `bytes` and `nodes`, and the driver's reserved graph memory before and after (device-wide, 0
    on the host driver)."""

    graphs: int
    bytes: int
    nodes: int
    pool_reserved_before: int
    pool_reserved_after: int


def _graph_info(g):
    """A GraphInfo from the cgrt_graph_info cgrt is handing over, read only as far as its
    struct_size says the library filled it."""
    size = g.struct_size
    vals = {}
    for fname, ftype in _lib.CGraphInfo._fields_[1:]:
        field = getattr(_lib.CGraphInfo, fname)
        filled = field.offset + field.size <= size
        v = getattr(g, fname) if filled else None
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        vals[fname] = v if v is not None or ftype is ctypes.c_char_p else 0
    vals["dir"] = _known(Direction, vals["dir"])
    vals["phase"] = _known(Phase, vals["phase"])
    return GraphInfo(**vals)


@dataclass(frozen=True)
class Finding:
    """One thing diagnose found about the calls made while capturing (cgrt_finding): `kind` is
    "sync", "host_read", "pageable_copy", "malloc", "legacy_stream" or "other"; `broke_capture`
    says it was the call refused that invalidated the capture (else captured but suspicious);
    `detail` is the log line's sentence."""

    kind: str
    broke_capture: bool
    call: str
    result: int
    result_name: str
    what: str
    step: int
    caller: str
    detail: str
    count: int


class Module:
    """A registered module: name, kind, layer and the callbacks. Owned by its Runtime. What cgrt
    was given at registration is read-only (cgrt keeps its own copy); `forward` and `backward`
    may be replaced by other callables (a module registered without a backward keeps none)."""

    __slots__ = (
        "name",
        "kind",
        "layer",
        "forward",
        "backward",
        "no_cp_comm",
        "stages_inputs",
        "handle",
        "index",
        "runtime",
        "_sealed",
    )

    def __setattr__(self, name, value):
        if getattr(self, "_sealed", False):
            if name not in ("forward", "backward"):
                raise AttributeError(
                    f"module '{self.name}': {name} was given to cgrt at registration and cannot "
                    "change"
                )
            if name == "backward" and self.backward is None:
                raise AttributeError(
                    f"module '{self.name}' was registered without a backward: cgrt never calls "
                    "one (register it with backward=)"
                )
            if not callable(value):
                raise TypeError(f"module '{self.name}': {name} must be callable")
        object.__setattr__(self, name, value)

    def __repr__(self):
        return f"cgrt.Module({self.name!r}, kind={self.kind.name.lower()}, layer={self.layer})"


# ---------------------------------------------------------------- host functions

# Host functions go through one C trampoline; the argument is an id into this table. An entry
# made while its call is captured is kept until its runtime releases its graphs (a replay runs it
# again); any other entry runs once and is dropped.
_HOST_FNS = {}
_HOST_IDS = iter(range(1, 1 << 62))

# Code cgrt runs from inside its own calls and that must not call cgrt (a host function, the log
# sink, the capture hooks): while one runs on a thread, a Runtime method that would re-enter cgrt
# raises Error(STATE) on that thread (a close() there would free the runtime under the call that
# is running it). Reading (stream, backend, stats, findings, config) stays allowed.
_INSIDE = threading.local()
_inside_any = 0  # how many run now, on any thread: the common case (none) reads no thread-local
_inside_lock = threading.Lock()  # host functions run on a thread of CUDA's on the cuda driver


def _run_inside(what, fn, *args):
    global _inside_any
    prev = getattr(_INSIDE, "what", None)
    _INSIDE.what = what
    with _inside_lock:
        _inside_any += 1
    try:
        return fn(*args)
    finally:
        with _inside_lock:
            _inside_any -= 1
        _INSIDE.what = prev


def _refuse_if_inside():
    if not _inside_any:
        return
    what = getattr(_INSIDE, "what", None)
    if what is not None:
        raise Error(Status.STATE, f"{what} must not call cgrt: cgrt runs it from inside its own calls")


@_lib.HOST_FN
def _host_trampoline(arg):
    entry = _HOST_FNS.get(arg)
    if entry is None:
        return
    fn, rt, once = entry
    if once:
        _HOST_FNS.pop(arg, None)
    try:
        _run_inside("a host function (Ctx.enqueue_host)", fn)
    except BaseException as e:  # noqa: BLE001 - reported at the next synchronize
        rt._host_errors.append(e)


# ---------------------------------------------------------------- the runtime

_PENDING_CALLBACK = 1  # what a Python callback that raised returns to cgrt


def _config_source(config, path, ini, name):
    """(path, ini, ini_name) as cgrt_open_options takes them, from what Runtime() was given."""
    given = [k for k, v in (("config", config), ("path", path), ("ini", ini)) if v is not None]
    if len(given) > 1:
        raise TypeError(f"Runtime: give one of config, path= and ini=, not {' and '.join(given)}")
    if config is not None:
        if isinstance(config, (bytes, os.PathLike)):
            path = config
        elif not isinstance(config, str):
            raise TypeError(
                f"Runtime config must be a path or INI text (a str), not {type(config).__name__}"
            )
        elif _is_file(config) or ("\n" not in config and "[" not in config):
            path = config
        else:
            ini = config
    if name is not None and ini is None:
        raise TypeError("Runtime: name= names INI text in messages; a file is named by its path")
    if path is not None:
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(
                f"Runtime path must be a str, bytes or os.PathLike, not {type(path).__name__}"
            )
        return _check.c_path(path, "config path"), None, None
    if ini is not None:
        text = _check.c_string(ini, "config text")
        label = _check.c_string(name, "config name") if name is not None else b"<python string>"
        return None, text, label
    return None, None, None


def _is_file(text):
    """Whether `text` names something that exists (a path too long or holding a NUL does not)."""
    try:
        return os.path.exists(text)
    except (OSError, ValueError):
        return False


def _lib_version(lib):
    """(major, minor) of the loaded libcgrt."""
    try:
        major, minor = lib.cgrt_version().decode().split(".")[:2]
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return (0, 0)


class Runtime:
    """An open cgrt runtime: its backend, device driver, modules, stream and statistics.

    Open it from a file with ``Runtime.from_file(path)``, from INI text with
    ``Runtime.from_ini(text, name=...)`` (also ``Runtime(path=...)``, ``Runtime(ini=...)``), or with
    nothing for the default configuration (CGRT_CONFIG, else the embedded `impl = none`).

    ``Runtime(config)`` with a str guesses, for callers written before from_file/from_ini, by this
    rule: a str naming a file (or folder) that exists is a path, whatever it holds ('[' included);
    otherwise a str holding a newline or '[' is INI text, and any other str is a path (a missing
    file then raises cgrt's Error(IO) naming it). bytes and os.PathLike are always paths.

    `log`, if given, receives (level, message) for every log line from the first on (level a
    LogLevel). `stream` is the host's own stream for cgrt to run on (a cudaStream_t as an int,
    e.g. torch's ``stream.cuda_stream``): cgrt enqueues, captures and replays there and
    ``Runtime.stream`` returns it; the host keeps it alive until close(), which waits for it but
    never destroys it. None (or 0): cgrt creates its own. The host driver has no CUDA streams and
    refuses one (cgrt's Error(INVAL)). Use the runtime as a context manager, or call close(). One
    runtime is driven by one thread."""

    def __init__(
        self,
        config=None,
        *,
        path=None,
        ini: Optional[str] = None,
        name: Optional[str] = None,
        log: Optional[Callable[[int, str], None]] = None,
        stream: Optional[int] = None,
    ):
        src = _config_source(config, path, ini, name)
        c_stream = _check.integer(stream, "Runtime stream", "void *") if stream is not None else 0
        lib = _lib_handle()
        if c_stream and _lib_version(lib) < (0, 4):
            raise Error(
                Status.UNSUPPORTED,
                f"{_LIB_PATH} (libcgrt {lib.cgrt_version().decode()}) has no "
                "cgrt_open_options.stream (since 0.4): it would run on a stream of its own",
            )
        self._lib = lib
        self._rt = ctypes.c_void_p()
        self._modules = []
        self._by_name = {}
        self._pending = None
        self._host_errors = []
        self._host_ids = set()
        self._in_step = False
        self._hooks = None
        self._log_fn = None
        self._log_cb = None
        self._sink_said = False
        self._closing = False
        self._closed = False
        opts = _lib.COpenOptions()
        opts.struct_size = ctypes.sizeof(_lib.COpenOptions)
        opts.path, opts.ini, opts.ini_name = src
        opts.stream = c_stream or None
        if log is not None:
            if not callable(log):
                raise TypeError(f"Runtime log must be callable, not {type(log).__name__}")
            self._log_fn = log
            opts.log = self._log_sink()
        rc = lib.cgrt_open_ex(ctypes.byref(self._rt), ctypes.byref(opts))
        if rc != 0:
            self._closed = True
            raise Error(rc, lib.cgrt_last_error(None).decode(errors="replace"))
        # One trampoline per kind of callback, shared by every module; `user` is the module index.
        self._fwd_cb = _lib.MODULE_FN(self._module_tramp(False))
        self._bwd_cb = _lib.MODULE_FN(self._module_tramp(True))
        self._prepare_cb = _lib.STEP_FN(self._step_tramp("prepare"))
        self._body_cb = _lib.STEP_FN(self._step_tramp("body"))
        self._null_module_fn = _lib.MODULE_FN()
        self._null_step_fn = _lib.STEP_FN()
        self._step_fns = None

    @classmethod
    def from_file(cls, path, **kw) -> "Runtime":
        """Opens a runtime from the INI file at `path` (str, bytes or os.PathLike), whatever its
        name holds. `kw`: log=, stream= (see Runtime). Raises Error (IO for a file that cannot be
        read, CONFIG naming file:line for a bad key)."""
        if path is None:
            raise TypeError("Runtime.from_file: path is None (Runtime() opens the default)")
        return cls(path=path, **kw)

    @classmethod
    def from_ini(cls, text: str, name: Optional[str] = None, **kw) -> "Runtime":
        """Opens a runtime from INI text held in memory (a str, one line or many). `name` names it
        in cgrt's messages ("<python string>" if None). `kw`: log=, stream= (see Runtime)."""
        if text is None:
            raise TypeError("Runtime.from_ini: text is None (Runtime() opens the default)")
        return cls(ini=text, name=name, **kw)

    def _log_sink(self):
        """The C log sink, made once per runtime: it calls self._log_fn."""
        if self._log_cb is None:

            def sink(user, level, msg):
                try:
                    lv = _known(LogLevel, level)
                    _run_inside("the log sink", self._log_fn, lv, msg.decode(errors="replace"))
                except BaseException as e:  # noqa: BLE001 - a log sink must not unwind into C
                    self._sink_raised(e)

            self._log_cb = _lib.LOG_FN(sink)
        return self._log_cb

    # -- lifetime

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            if not self._closed:
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def close(self) -> None:
        """Waits for the stream, frees every graph, finalizes the backend and closes the driver.
        Safe to call twice. From inside a step (a callback) cgrt refuses: Error(STATE), and the
        runtime stays open and usable; close it after the step."""
        if self._closed:
            return
        _refuse_if_inside()
        self._closing = True  # a log line written while tearing down must not read the runtime
        try:
            rc = self._lib.cgrt_close(self._rt)
        finally:
            self._closing = False
        if rc == Status.STATE:
            # cgrt_close refuses inside a step before it tears anything down (its only
            # CGRT_E_STATE); any other result means the runtime is freed.
            raise self._fail(rc)
        self._closed = True
        self._drop_host_fns(all_of_them=True)
        self._closed_hook()
        self._rt = ctypes.c_void_p()
        if rc != 0:
            raise Error(rc, "cgrt_close: " + _strerror(rc))

    def _closed_hook(self):
        """For subclasses: runs after cgrt_close (graphs freed)."""

    def _handle(self):
        """The C runtime, for a call that may re-enter cgrt's callbacks or change the runtime."""
        rt = self._peek()
        _refuse_if_inside()
        return rt

    def _peek(self):
        """The C runtime, for reading; also from a log sink, capture hook or host function."""
        if self._closed:
            raise Error(Status.STATE, "the runtime is closed")
        if self._closing:
            raise Error(Status.STATE, "the runtime is closing")
        return self._rt

    def _sink_raised(self, e):
        """A log sink's exception cannot reach the caller (C is between them): said once."""
        if self._sink_said:
            return
        self._sink_said = True
        try:
            warnings.warn(
                f"cgrt: the log sink raised {type(e).__name__}: {e}; the line was dropped (said "
                "once per runtime)",
                RuntimeWarning,
                stacklevel=1,
            )
        except BaseException:  # noqa: BLE001 - warnings turned into errors: still not into C
            pass

    def _fail(self, rc, exception=None):
        msg = self._lib.cgrt_last_error(self._rt).decode(errors="replace")
        return Error(rc, msg, exception)

    # -- facts

    @property
    def backend(self) -> str:
        """The loaded backend's name, e.g. "local"."""
        return self._lib.cgrt_backend_name(self._peek()).decode()

    def set_log(self, fn: Optional[Callable[[int, str], None]]) -> None:
        """Replaces the log sink: `fn(level, message)` receives every log line from now on (as
        Runtime(log=) does from the first); None restores cgrt's own (stderr). Not from the log
        sink itself, a host function or a capture hook (Error(STATE))."""
        if fn is not None and not callable(fn):
            raise TypeError(f"set_log: fn must be callable or None, not {type(fn).__name__}")
        h = self._handle()
        if fn is None:
            rc = self._lib.cgrt_set_log(h, _lib.LOG_FN(), None)
            if rc != 0:
                raise self._fail(rc)
            self._log_fn = None
            return
        prev, self._log_fn = self._log_fn, fn  # the sink (kept in self._log_cb) calls it
        rc = self._lib.cgrt_set_log(h, self._log_sink(), None)
        if rc != 0:
            self._log_fn = prev
            raise self._fail(rc)

    def log(self, level: int, msg: str) -> None:
        """Writes msg to the runtime's log at `level` (1 error, 2 warn, 3 info, 4 debug) if that
        level is enabled, through the same sink as cgrt's own lines."""
        if getattr(_INSIDE, "what", None) == "the log sink":
            _refuse_if_inside()  # it would call the sink again, without end
        lv = _check.integer(level, "log level", "int")
        if not 1 <= lv <= 4:
            raise ValueError(f"log level = {lv} is out of range: 1 error, 2 warn, 3 info, 4 debug")
        text = _check.c_string(msg, "log message")
        if _lib.has(self._lib, "cgrt_log_message"):
            self._lib.cgrt_log_message(self._peek(), lv, text)

    def config(self, section: str, key: str) -> str:
        """The value in force of a configuration key as `cgrt check` prints it, e.g.
        rt.config("cuda_graph", "rebind") -> "auto". Error(NOTFOUND) for an unknown key."""
        if not _lib.has(self._lib, "cgrt_config_get"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_config_get")
        buf = ctypes.create_string_buffer(4096)
        rc = self._lib.cgrt_config_get(
            self._peek(),
            _check.c_string(section, "config section"),
            _check.c_string(key, "config key"),
            buf,
            4096,
        )
        if rc != 0:
            raise self._fail(rc)
        return buf.value.decode()

    @property
    def stream(self) -> int:
        """The stream cgrt runs on (a cudaStream_t on the cuda driver), as an int."""
        return self._lib.cgrt_stream(self._peek()) or 0

    @property
    def modules(self) -> Tuple[Module, ...]:
        return tuple(self._modules)

    def stats_text(self, json: bool = False) -> str:
        """Every counter by its cgrt.h name, as cgrt_stats_format writes it (text lines, or one
        JSON object): the same figures the same way as C hosts and the cgrt command print them."""
        s = _lib.CStats()
        s.struct_size = ctypes.sizeof(_lib.CStats)
        rc = self._lib.cgrt_stats_get(self._peek(), ctypes.byref(s))
        if rc != 0:
            raise self._fail(rc)
        style = 1 if json else 0
        n = self._lib.cgrt_stats_format(ctypes.byref(s), style, None, 0)
        if n < 0:
            raise Error(n, "cgrt_stats_format refused the statistics")
        buf = ctypes.create_string_buffer(n + 1)
        self._lib.cgrt_stats_format(ctypes.byref(s), style, buf, n + 1)
        return buf.value.decode()

    def stats(self) -> Stats:
        """The runtime's counters since it opened."""
        s = _lib.CStats()
        s.struct_size = ctypes.sizeof(_lib.CStats)
        rc = self._lib.cgrt_stats_get(self._peek(), ctypes.byref(s))
        if rc != 0:
            raise self._fail(rc)
        n = min(s.num_buckets, _lib.STATS_MAX_BUCKETS)
        return Stats(
            steps=s.steps,
            steps_by_mode=tuple(s.steps_by_mode),
            calls_by_mode=tuple(s.calls_by_mode),
            captures=s.captures,
            instantiations=s.instantiations,
            updates=s.updates,
            update_refusals=s.update_refusals,
            rebinds=s.rebinds,
            evictions=s.evictions,
            fallbacks=s.fallbacks,
            live_graphs=s.live_graphs,
            padding_tokens=s.padding_tokens,
            capture_ns=s.capture_ns,
            instantiate_ns=s.instantiate_ns,
            graph_mem_used=s.graph_mem_used,
            graph_mem_reserved=s.graph_mem_reserved,
            real_tokens=s.real_tokens,
            bucket_changes=s.bucket_changes,
            num_buckets=s.num_buckets,
            buckets=tuple(s.buckets[:n]),
            graph_bytes=s.graph_bytes,
            graph_pool_bytes=s.graph_pool_bytes,
            graph_exec_bytes=s.graph_exec_bytes,
            graph_pool_idle=s.graph_pool_idle,
            graph_bytes_peak=s.graph_bytes_peak,
            graph_nodes=s.graph_nodes,
            memory_budget=s.memory_budget,
            budget_eager=s.budget_eager,
            budget_evictions=s.budget_evictions,
            verifications=s.verifications,
            verify_mismatches=s.verify_mismatches,
            verify_skipped=s.verify_skipped,
            findings=s.findings,
            comm_waits=s.comm_waits,
            rebind_copy_keys=s.rebind_copy_keys,
            rebind_eager_keys=s.rebind_eager_keys,
            copy_bytes=s.copy_bytes,
            staged_bytes=s.staged_bytes,
            rebind_variant_keys=s.rebind_variant_keys,
            eager_phase_steps=s.eager_phase_steps,
            timed_steps=s.timed_steps,
            time_probe_steps=s.time_probe_steps,
            time_eager_steps=s.time_eager_steps,
            time_exact_steps=s.time_exact_steps,
            time_eager_counts=s.time_eager_counts,
            time_exact_counts=s.time_exact_counts,
            time_implied_counts=s.time_implied_counts,
            time_rare_refused=s.time_rare_refused,
            queue_waits=s.queue_waits,
            queue_wait_ns=s.queue_wait_ns,
            sync_guard_waits=s.sync_guard_waits,
            sync_guard_late=s.sync_guard_late,
            unrepeated_units=s.unrepeated_units,
        )

    def clear_findings(self) -> None:
        """Forgets every diagnose finding kept so far (Stats.findings still counts them). Not
        inside a step (cgrt's Error(STATE))."""
        if not _lib.has(self._lib, "cgrt_findings_clear"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_findings_clear")
        rc = self._lib.cgrt_findings_clear(self._handle())
        if rc != 0:
            raise self._fail(rc)

    def backend_info(self) -> BackendInfo:
        """The configured backend: name, path, caps and what steps of each phase get
        (cgrt_backend_info), for a host that wants to know before it runs. Example: under
        transformer_engine, ``rt.backend_info().phases[Phase.INFER] is PhaseRun.CORE_EAGER``."""
        if not _lib.has(self._lib, "cgrt_backend_info_get"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_backend_info_get")
        info = _lib.CBackendInfo()
        info.struct_size = ctypes.sizeof(_lib.CBackendInfo)
        rc = self._lib.cgrt_backend_info_get(self._peek(), ctypes.byref(info))
        if rc != 0:
            # It fails only for arguments this package never gives, and says nothing then.
            raise Error(rc, "cgrt_backend_info_get: " + _strerror(rc))
        return BackendInfo(
            name=info.name.decode() if info.name else "",
            path=os.fsdecode(info.path) if info.path else "",
            caps=BackendCaps(info.caps),
            phases={p: _known(PhaseRun, info.phases[p]) for p in Phase},
        )

    def backend_figures(self) -> Dict[str, int]:
        """The backend's own named figures (cgrt_backend_figures): counts of its own decisions
        that stats() does not know, e.g. local's infer steps above the largest bucket. Empty for a
        backend that reports none."""
        if not _lib.has(self._lib, "cgrt_backend_figures"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_backend_figures")
        out: Dict[str, int] = {}

        def take(user, name, value):
            out[name.decode()] = int(value)

        fn = _lib.FIGURE_FN(take)
        rc = self._lib.cgrt_backend_figures(self._peek(), fn, None)
        if rc != 0:
            raise self._fail(rc)
        return out

    def findings(self) -> Tuple[Finding, ...]:
        """What diagnose found so far (`[runtime] diagnose`), oldest first; repeats of one are
        counted in it. Empty when nothing was found or diagnose is off."""
        if not _lib.has(self._lib, "cgrt_finding_get"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_finding_get (diagnose)")
        n = ctypes.c_size_t()
        rc = self._lib.cgrt_findings_count(self._peek(), ctypes.byref(n))
        if rc != 0:
            raise self._fail(rc)
        out = []
        for i in range(n.value):
            f = _lib.CFinding()
            f.struct_size = ctypes.sizeof(_lib.CFinding)
            rc = self._lib.cgrt_finding_get(self._peek(), i, ctypes.byref(f))
            if rc != 0:
                raise self._fail(rc)

            def text(b):
                return b.decode(errors="replace") if b else ""

            out.append(
                Finding(
                    kind=text(self._lib.cgrt_finding_kind_name(f.kind)),
                    broke_capture=bool(f.broke_capture),
                    call=text(f.call),
                    result=f.result,
                    result_name=text(f.result_name),
                    what=text(f.what),
                    step=f.step,
                    caller=text(f.caller),
                    detail=text(f.detail),
                    count=f.count,
                )
            )
        return tuple(out)

    # -- modules

    def register(
        self,
        name: str,
        kind,
        forward: Callable,
        backward: Optional[Callable] = None,
        layer: int = -1,
        no_cp_comm: bool = False,
        stages_inputs: bool = False,
    ) -> Module:
        """Registers a module: `forward(ctx, args)` (and `backward(ctx, args)`, optional) enqueue
        the call's work on ctx.stream and return None (or 0); a nonzero int or an exception fails
        the call. `kind` is a Kind, its value or its name ("attn", "mlp"...): it decides whether
        scoped backends graph the module. `no_cp_comm=True` says the calls issue no collectives
        on ctx.comm (the step's context-parallel communicator): they then see ctx.comm 0, and with
        NCCL's graph mixing off cgrt runs them outside a graph without waiting for the graphs it
        launched (Stats.comm_waits). `stages_inputs=True` says the host keeps the buffers the
        module reads in place itself and its callbacks address their own buffers, not
        args.buffers: cgrt never hands it private copies (cgrt.torch registers its modules so).
        Register every module before the first step."""
        if not callable(forward):
            raise Error(Status.INVAL, f"register('{name}'): forward must be callable")
        if backward is not None and not callable(backward):
            raise Error(Status.INVAL, f"register('{name}'): backward must be callable or None")
        c_name = _check.c_string(name, "register: the module name")
        m = Module()
        m.name = name
        m.kind = _enum(Kind, kind, f"register('{name}'): kind")
        m.layer = _check.integer(layer, f"register('{name}'): layer", "int")
        m.forward = forward
        m.backward = backward
        m.no_cp_comm = bool(no_cp_comm)
        m.stages_inputs = bool(stages_inputs)
        m.index = len(self._modules)
        m.runtime = self
        d = _lib.CModuleDesc()
        d.struct_size = ctypes.sizeof(_lib.CModuleDesc)
        d.name = c_name
        d.kind = int(m.kind)
        d.layer = m.layer
        d.forward = self._fwd_cb
        d.backward = self._bwd_cb if backward is not None else self._null_module_fn
        d.user = m.index
        d.no_cp_comm = 1 if no_cp_comm else 0
        d.stages_inputs = 1 if stages_inputs else 0
        handle = ctypes.c_void_p()
        rc = self._lib.cgrt_module_register(self._handle(), ctypes.byref(d), ctypes.byref(handle))
        if rc != 0:
            raise self._fail(rc)
        m.handle = handle
        m._sealed = True
        self._modules.append(m)
        self._by_name[name] = m
        return m

    def module(self, name: str) -> Module:
        return self._by_name[name]

    def _module_tramp(self, backward):
        label = "backward" if backward else "forward"

        def tramp(ctx_ptr, args_ptr, user):
            try:
                m = self._modules[user or 0]
                fn = m.backward if backward else m.forward
                ctx = Ctx(self, ctx_ptr, m, label)
                args = ArgsView(args_ptr, m, label)
                try:
                    rc = fn(ctx, args)
                finally:
                    # Views of cgrt's memory die with the callback (a private copy of the args
                    # is freed or reused after it): later uses raise instead of reading it.
                    ctx._c = None
                    args._c = None
                return 0 if rc is None else _check.c_result(rc, f"module '{m.name}' {label}")
            except BaseException as e:  # noqa: BLE001 - never unwind into C
                self._remember(e)
                return _PENDING_CALLBACK

        return tramp

    def _step_tramp(self, which):
        def tramp(ctx_ptr, user):
            try:
                fn = self._step_fns[0 if which == "prepare" else 1]
                ctx = Ctx(self, ctx_ptr, None, which)
                try:
                    rc = fn(ctx)
                finally:
                    ctx._c = None
                return self._step_result(which, ctx_ptr, rc)
            except BaseException as e:  # noqa: BLE001 - never unwind into C
                self._remember(e)
                return _PENDING_CALLBACK

        return tramp

    def _step_result(self, which, ctx_ptr, rc):
        """What a prepare or body callback's return value means to cgrt (subclasses keep it): a
        nonzero int fails the step (it must fit a C int), anything else is ignored."""
        return _check.c_result(rc, f"the step's {which}") if isinstance(rc, int) and rc else 0

    def _remember(self, e):
        # The latest: after a capture that raised, cgrt retries eagerly, and if that fails too,
        # its exception is the one that failed the call.
        self._pending = e

    def _take_pending(self):
        e, self._pending = self._pending, None
        return e

    def _raise_for(self, rc):
        e = self._take_pending()
        if e is not None and not isinstance(e, Exception):
            raise e  # KeyboardInterrupt, SystemExit...: not ours to wrap
        err = self._fail(rc)
        if isinstance(e, Error) and e.exception is None and (e.code, e.message) == (
            err.code,
            err.message,
        ):
            # A cgrt call inside the callback failed and the callback let its Error through:
            # cgrt kept that call's sentence and code, so this is the same error. Raised as it
            # is, it is said once (also in a traceback) and points at the call that failed.
            raise e
        root = e.exception if isinstance(e, Error) and e.exception is not None else e
        err = self._fail(rc, root)
        if root is not None:
            raise err from root
        raise err

    # -- steps and calls

    def step(
        self,
        phase,
        tokens: int = 0,
        prepare: Optional[Callable] = None,
        body: Optional[Callable] = None,
        *,
        buffers: Sequence = (),
        seqlens: Optional[Sequence[int]] = None,
        cp_size: int = 1,
        microbatches: int = 1,
        stages_inputs: bool = False,
    ) -> StepReport:
        """Runs one step: `prepare(ctx)` (always eager: stage ctx.tokens inputs into the static
        buffers and pad to ctx.padded_tokens), then `body(ctx)`, eagerly, captured or replaced by
        a replay as the backend decides; the body calls forward()/backward() per module.
        `buffers` are the step's static buffers (Buffer or (ptr, bytes, access));
        `stages_inputs=True`: the body reads its own buffers, not ctx.buffers (never private
        copies). Raises Error."""
        if body is None:
            raise Error(Status.INVAL, "step: body is required")
        if not callable(body) or (prepare is not None and not callable(prepare)):
            raise Error(Status.INVAL, "step: body (and prepare, when given) must be callable")
        h = self._handle()
        d = _lib.CStepDesc()
        d.struct_size = ctypes.sizeof(_lib.CStepDesc)
        d.phase = int(_enum(Phase, phase, "step phase"))
        d.tokens = _check.integer(tokens, "step tokens", "int64_t")
        keep = []
        if seqlens is not None:
            n = _check.integer(len(seqlens), "step: the number of seqlens", "int")
            arr = (ctypes.c_int32 * n)(
                *(_check.integer(x, f"step seqlens[{i}]", "int32_t") for i, x in enumerate(seqlens))
            )
            keep.append(arr)
            d.seqlens = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))
            d.num_sequences = n
        d.cp_size = _check.integer(cp_size, "step cp_size", "int")
        d.microbatches = _check.integer(microbatches, "step microbatches", "int")
        if buffers is not None and len(buffers):
            if isinstance(buffers, ctypes.Array):
                if buffers._type_ is not _lib.CBuffer:
                    raise TypeError(
                        f"step buffers: a ctypes array of {buffers._type_.__name__}, not of "
                        "cgrt_buffer (give Buffers, or an array _c_buffers() made)"
                    )
                arr = buffers
            else:
                arr = _c_buffers(buffers)
            keep.append(arr)
            d.buffers = ctypes.cast(arr, ctypes.POINTER(_lib.CBuffer))
            d.num_buffers = len(arr)
        d.prepare = self._prepare_cb if prepare is not None else self._null_step_fn
        d.body = self._body_cb
        d.stages_inputs = 1 if stages_inputs else 0
        rep = _lib.CStepReport()
        rep.struct_size = ctypes.sizeof(_lib.CStepReport)
        nested = self._in_step
        saved = self._step_fns
        self._step_fns = (prepare, body)
        self._in_step = True
        try:
            rc = self._lib.cgrt_step(h, ctypes.byref(d), ctypes.byref(rep))
        finally:
            self._in_step = nested
            self._step_fns = saved
        if rc != 0 and nested:
            # cgrt refused a step inside a step; what the outer step's callbacks left pending
            # is the outer step's to report.
            raise self._fail(rc)
        if rc != 0:
            self._raise_for(rc)
        e = self._take_pending()
        if e is not None:
            # A callback raised during a capture and cgrt ran the work eagerly instead, which
            # succeeded: nothing failed, but say why the capture did not happen.
            warnings.warn(
                f"cgrt: a capture fell back to eager because a callback raised "
                f"{type(e).__name__}: {e}",
                RuntimeWarning,
                stacklevel=2,
            )
        return StepReport(
            Mode(rep.mode),
            rep.padded_tokens,
            rep.calls_eager,
            rep.calls_captured,
            rep.calls_replayed,
            rep.graphs_built,
            rep.fallbacks,
            rep.host_ns,
            rep.copy_bytes,
        )

    def forward(self, module: Module, ctx: Ctx, args: Optional[Args] = None, **kw) -> None:
        """Runs `module`'s forward from inside the body with the body's ctx: eagerly, captured or
        as a replay. `args` is an Args, or give key=, microbatch=, buffers= here."""
        self._call(self._lib.cgrt_forward, module, ctx, args, kw)

    def backward(self, module: Module, ctx: Ctx, args: Optional[Args] = None, **kw) -> None:
        """As forward(), for the module's backward."""
        self._call(self._lib.cgrt_backward, module, ctx, args, kw)

    def _call(self, fn, module, ctx, args, kw):
        if args is None:
            args = Args(**kw)
        elif kw:
            raise TypeError("give either an Args or key=/microbatch=/buffers=, not both")
        try:
            ok = module.runtime is self and ctx._rt is self and ctx._c is not None
            c_args, c_module, c_ctx = args._ref, module.handle, ctx._ptr
        except AttributeError:
            ok = False
        if not ok:
            self._refuse_call(module, ctx, args)
        rc = fn(self._handle(), c_module, c_ctx, c_args)
        if rc != 0:
            self._raise_for(rc)

    def _refuse_call(self, module, ctx, args):
        """Raises what is wrong with a module call's arguments (the checks _call makes at once)."""
        if not isinstance(args, Args):
            raise TypeError(f"args must be a cgrt.Args, not {type(args).__name__}")
        if not isinstance(module, Module):
            raise TypeError(f"expected a cgrt.Module from register(), not {type(module).__name__}")
        if module.runtime is not self:
            # cgrt would read the module to find out, and another runtime's may be freed.
            raise Error(Status.INVAL, f"module '{module.name}' is registered with another runtime")
        self._ctx_ptr(ctx)
        raise AssertionError("_refuse_call found nothing wrong")  # not reached

    def _ctx_ptr(self, ctx):
        """The C ctx behind `ctx`, refused when its callback returned (cgrt would read memory
        that is gone) or it is another runtime's."""
        if not isinstance(ctx, Ctx):
            raise TypeError(f"expected the cgrt.Ctx a callback was given, not {type(ctx).__name__}")
        ctx._live()
        if ctx._rt is not self:
            raise Error(Status.INVAL, "this ctx was given by another runtime's step")
        return ctx._ptr

    # -- context parallelism

    def set_world_comm(self, comm: Optional[int] = None) -> None:
        """Hands cgrt the world NCCL communicator (an ncclComm_t, as an int) for [dynamic_cp]:
        collective, every rank calls it once before its first step. cgrt splits one communicator
        per cp size; a step's body finds its group's in ctx.comm and its rank in ctx.cp_rank. The
        host driver accepts None and stands in placeholders. Raises Error."""
        if comm is not None:
            comm = _check.integer(comm, "set_world_comm comm", "void *")
        rc = self._lib.cgrt_set_world_comm(self._handle(), comm or None)
        if rc != 0:
            raise self._fail(rc)

    # -- host functions and synchronization

    def _enqueue_host(self, ctx, fn):
        if not callable(fn):
            raise TypeError(f"enqueue_host: fn must be callable, not {type(fn).__name__}")
        self._handle()
        c = ctx._live()
        hid = next(_HOST_IDS)
        once = c.mode != Mode.CAPTURE
        _HOST_FNS[hid] = (fn, self, once)
        self._host_ids.add(hid)
        rc = self._lib.cgrt_enqueue_host(ctx._ptr, _host_trampoline, hid)
        if rc != 0:
            _HOST_FNS.pop(hid, None)
            self._host_ids.discard(hid)
            raise self._fail(rc)
        if once:
            self._host_ids.discard(hid)  # it removes itself when it runs

    def _drop_host_fns(self, all_of_them=False):
        for hid in self._host_ids:
            _HOST_FNS.pop(hid, None)
        self._host_ids.clear()
        if all_of_them:
            for hid in [k for k, v in _HOST_FNS.items() if v[1] is self]:
                _HOST_FNS.pop(hid, None)

    def synchronize(self) -> None:
        """Waits until the work enqueued on the runtime's stream has run (on the host driver, runs
        it). Raises Error if a host function raised."""
        rc = self._lib.cgrt_synchronize(self._handle())
        if rc != 0:
            raise self._fail(rc)
        if self._host_errors:
            errs, self._host_errors = self._host_errors, []
            raise Error(
                Status.CALLBACK,
                f"{len(errs)} host function(s) enqueued with Ctx.enqueue_host raised",
                errs[0],
            ) from errs[0]

    def device_synchronize(self) -> None:
        """Waits until all work on the runtime's device has run (cudaDeviceSynchronize), never
        during a capture of any runtime of the process: it waits for the captures underway and
        holds new ones back (cgrt_device_synchronize). For a thread that must synchronize the
        whole device beside runtimes that capture, where torch.cuda.synchronize() would break their
        captures or, racing one's begin or end, crash the CUDA driver. Any thread may call it while
        another steps (cuda driver); on the host driver it is a call like synchronize(). Raises
        Error (Status.CAPTURE from inside a capture, Status.STATE inside a step)."""
        rc = self._lib.cgrt_device_synchronize(self._handle())
        if rc != 0:
            raise self._fail(rc)

    def release_graphs(self) -> Optional[ReleaseReport]:
        """Waits for the stream, then frees every graph the backend holds; later steps warm up and
        capture again. Returns what was freed, a ReleaseReport (cgrt_release_graphs_ex); None
        with a libcgrt that lacks it. Not inside a step (cgrt's Error(STATE))."""
        h = self._handle()
        if _lib.has(self._lib, "cgrt_release_graphs_ex"):
            rep = _lib.CReleaseReport()
            rep.struct_size = ctypes.sizeof(_lib.CReleaseReport)
            rc = self._lib.cgrt_release_graphs_ex(h, ctypes.byref(rep))
        else:
            rep = None
            rc = self._lib.cgrt_release_graphs(h)
        if rc != 0:
            raise self._fail(rc)
        self._drop_host_fns()
        self._released_hook()
        if rep is None:
            return None
        return ReleaseReport(
            graphs=rep.graphs,
            bytes=rep.bytes,
            nodes=rep.nodes,
            pool_reserved_before=rep.pool_reserved_before,
            pool_reserved_after=rep.pool_reserved_after,
        )

    def release_key(self, module: "Module", key: int) -> int:
        """Waits for the stream, then frees the graphs of `module`'s calls with this key
        (Args.key; every direction, phase, microbatch and token size of it); later calls with it
        warm up and capture again. For a key the host is done with, whose graphs would otherwise
        stay until max_graphs evicts them. Returns the executables freed
        (cgrt_module_release_key). Not inside a step (cgrt's Error(STATE))."""
        if not _lib.has(self._lib, "cgrt_module_release_key"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_module_release_key")
        if not isinstance(module, Module):
            raise TypeError(f"expected a cgrt.Module from register(), not {type(module).__name__}")
        if module.runtime is not self:
            # cgrt would read the module to find out, and another runtime's may be freed.
            raise Error(Status.INVAL, f"module '{module.name}' is registered with another runtime")
        key = _check.integer(key, "release_key key", "uint64_t")
        n = ctypes.c_size_t(0)
        rc = self._lib.cgrt_module_release_key(self._handle(), module.handle, key, ctypes.byref(n))
        if rc != 0:
            raise self._fail(rc)
        return n.value

    def graphs(self) -> Tuple[GraphInfo, ...]:
        """Every live graph of the runtime (every cache of its backend), as cgrt_graph_list shows
        them, copied while cgrt listed them, in no set order: what each costs (bytes, nodes,
        build times) and how it was used (last_use, replays). Their sums are in stats()
        (graph_bytes, graph_nodes, live_graphs). Not inside a step (cgrt's Error(STATE)), nor from
        a host function, the log sink or a capture hook."""
        if not _lib.has(self._lib, "cgrt_graph_list"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_graph_list")
        h = self._handle()
        out = []
        failed = []

        def each(user, g):
            try:
                out.append(_graph_info(g.contents))
                return 0
            except BaseException as e:  # noqa: BLE001 - never unwind into C; raised below
                failed.append(e)
                return 1

        cb = _lib.GRAPH_FN(each)
        rc = self._lib.cgrt_graph_list(h, cb, None)
        if failed:
            raise failed[0]
        if rc != 0:
            raise self._fail(rc)
        return tuple(out)

    def _released_hook(self):
        """For subclasses: runs after cgrt_release_graphs (graphs freed)."""

    # -- capture notifications

    def set_capture_hooks(
        self,
        begin: Optional[Callable[[int], None]] = None,
        end: Optional[Callable[[int], None]] = None,
        pool_allocator=None,
    ) -> None:
        """`begin(stream)` runs right before every capture cgrt begins, `end(stream)` right after
        it ended, on this thread, inside step(). A begin that raises refuses the capture (the work
        runs eagerly); an end that raises discards the graph (likewise). None removes a hook.

        `pool_allocator` declares the host's pool allocator: a shared object, or several (a
        sequence, or one string separated by ':'), named by file name ("libc10_cuda.so") or path,
        whose device allocations and frees made while cgrt captures come from a pool `begin`
        routes them to; diagnose does not report those (cgrt_set_capture_hooks_ex). None declares
        none. An older libcgrt without cgrt_set_capture_hooks_ex sets the hooks without it (a
        RuntimeWarning says so): only what diagnose reports differs."""
        if pool_allocator is not None and not _lib.has(self._lib, "cgrt_set_capture_hooks_ex"):
            warnings.warn(
                f"cgrt: {_LIB_PATH} has no cgrt_set_capture_hooks_ex: the pool allocator is not "
                "declared, and diagnose may report its allocations while capturing as suspicious",
                RuntimeWarning,
                stacklevel=2,
            )
            pool_allocator = None
        if pool_allocator is not None:
            if isinstance(pool_allocator, (str, bytes, os.PathLike)):
                pool_allocator = [pool_allocator]
            pool = b":".join(_check.c_path(p, "pool_allocator") for p in pool_allocator)
        elif not _lib.has(self._lib, "cgrt_set_capture_hooks"):
            raise Error(Status.UNSUPPORTED, f"{_LIB_PATH} has no cgrt_set_capture_hooks")

        def wrap(fn, which):
            if fn is None:
                return _lib.CAPTURE_FN()

            def hook(user, stream):
                try:
                    _run_inside(f"the capture {which} hook", fn, stream or 0)
                    return 0
                except BaseException as e:  # noqa: BLE001 - never unwind into C
                    warnings.warn(
                        f"cgrt: the capture {which} hook raised {type(e).__name__}: {e}; "
                        "the work runs eagerly",
                        RuntimeWarning,
                        stacklevel=1,
                    )
                    return 1

            return _lib.CAPTURE_FN(hook)

        b, e = wrap(begin, "begin"), wrap(end, "end")
        if pool_allocator is not None:
            h = _lib.CCaptureHooks()
            h.struct_size = ctypes.sizeof(_lib.CCaptureHooks)
            h.begin, h.end, h.user, h.pool_allocator = b, e, None, pool
            rc = self._lib.cgrt_set_capture_hooks_ex(self._handle(), ctypes.byref(h))
        else:
            rc = self._lib.cgrt_set_capture_hooks(self._handle(), b, e, None)
        if rc != 0:
            raise self._fail(rc)
        self._hooks = (b, e)  # kept alive while cgrt may call them
