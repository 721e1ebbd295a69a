"""Find out where the course runs: a CUDA GPU that Triton can use, or the Triton interpreter on the CPU."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

import torch

from .device import driver_version, interpreter_requested, shared_memory_limit, use_interpreter

_ENV: Environment | None = None


@dataclass(frozen=True)
class Environment:
    device: str  # "cuda" or "cpu"
    interpreter: bool  # True: Triton kernels run through TRITON_INTERPRET=1 on the CPU
    gpu_name: str | None = None
    capability: tuple[int, int] | None = None
    supports_bf16: bool = False
    shared_memory_per_block: int | None = None  # bytes, the opt-in maximum a kernel may use
    driver: str | None = None
    torch_version: str = torch.__version__
    triton_version: str = ""
    python_version: str = platform.python_version()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """Input dtypes worth grading on this machine (the interpreter has no bf16)."""
        if self.interpreter:
            return (torch.float32, torch.float16)
        if self.supports_bf16:
            return (torch.float16, torch.bfloat16, torch.float32)
        return (torch.float16, torch.float32)

    @property
    def label(self) -> str:
        """One line naming what the grader ran on, for every report."""
        if self.interpreter:
            return "Triton interpreter on the CPU (timings meaningless)"
        return f"{self.gpu_name} (sm_{self.capability[0]}{self.capability[1]})"

    def table(self) -> str:
        rows = [
            ("mode", "GPU" if not self.interpreter else "Triton interpreter (CPU)"),
            ("device", self.gpu_name or "cpu"),
        ]
        if not self.interpreter:
            rows += [
                ("compute capability", f"{self.capability[0]}.{self.capability[1]}"),
                ("bf16", "yes" if self.supports_bf16 else "no (fp16 only)"),
                ("shared memory / block", f"{(self.shared_memory_per_block or 0) // 1024} KiB"),
                ("driver", self.driver or "?"),
            ]
        rows += [
            ("dtypes graded", ", ".join(str(d).replace("torch.", "") for d in self.dtypes)),
            ("torch", self.torch_version),
            ("triton", self.triton_version or "not installed"),
            ("python", self.python_version),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"  {k:<{width}}  {v}" for k, v in rows]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _triton_version() -> str:
    try:
        import triton
        return triton.__version__
    except Exception:  # noqa: BLE001 - a broken triton install is reported, not raised
        return ""


def _gpu_usable_by_triton() -> str | None:
    """None when Triton can compile for the GPU, else the reason it cannot."""
    major, _ = torch.cuda.get_device_capability(0)
    if major < 7:
        return f"Triton needs compute capability 7.0 or newer; this GPU has {major}.x"
    if not _triton_version():
        return "triton is not installed"
    return None


def detect(force_interpreter: bool | None = None) -> Environment:
    """Detect the environment once and switch to the interpreter when there is no usable GPU.

    TRITON_INTERPRET must be set before any @triton.jit decorator runs, so this is called by grader.setup(),
    which is the first cell of every notebook, and before any reference solution is loaded.
    """
    global _ENV
    if _ENV is not None and force_interpreter is None:
        return _ENV
    notes: list[str] = []
    wants_interp = interpreter_requested()
    if force_interpreter is not None:
        wants_interp = force_interpreter
    gpu = torch.cuda.is_available()
    if gpu and not wants_interp:
        reason = _gpu_usable_by_triton()
        if reason:
            notes.append(f"{reason}: falling back to the Triton interpreter on the CPU")
            gpu = False
    if gpu and not wants_interp:
        props = torch.cuda.get_device_properties(0)
        _ENV = Environment(
            device="cuda", interpreter=False, gpu_name=props.name,
            capability=(props.major, props.minor), supports_bf16=torch.cuda.is_bf16_supported(),
            shared_memory_per_block=shared_memory_limit(0), driver=driver_version(), triton_version=_triton_version(),
            notes=tuple(notes),
        )
    else:
        use_interpreter()
        if not torch.cuda.is_available():
            notes.append("no CUDA GPU found: Triton kernels run through the interpreter (TRITON_INTERPRET=1)")
        elif wants_interp and force_interpreter is None:
            notes.append("TRITON_INTERPRET=1 was set: grading on the CPU although a GPU is present")
        _ENV = Environment(device="cpu", interpreter=True, triton_version=_triton_version(), notes=tuple(notes))
    if _ENV.interpreter:
        from . import safety
        safety.install_interpreter_bounds_check()
    return _ENV
