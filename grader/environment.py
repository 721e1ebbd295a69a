"""Find out where the course runs: a CUDA GPU that Triton can use, or the Triton interpreter on the CPU."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

import torch

from .device import driver_version, interpreter_requested, shared_memory_limit, use_interpreter
from .messages import Text, catalogue, join, ljust, width

T = catalogue("environment", {
    "interpreter_label": ("Triton interpreter on the CPU (timings meaningless)",
                          "CPU 上的 Triton 解释器（计时没有参考意义）"),
    "mode": ("mode", "模式"),
    "mode_gpu": ("GPU", "GPU"),
    "mode_interpreter": ("Triton interpreter (CPU)", "Triton 解释器（CPU）"),
    "device": ("device", "设备"),
    "capability": ("compute capability", "计算能力（compute capability）"),
    "bf16": ("bf16", "bf16"),
    "yes": ("yes", "支持"),
    "no_bf16": ("no (fp16 only)", "不支持（只能用 fp16）"),
    "smem": ("shared memory / block", "每个线程块的共享内存"),
    "kib": ("{n} KiB", "{n} KiB"),
    "driver": ("driver", "驱动"),
    "dtypes": ("dtypes graded", "判分用的数据类型"),
    "not_installed": ("not installed", "未安装"),
    "note": ("note: {note}", "注意：{note}"),
    "old_gpu": ("Triton needs compute capability 7.0 or newer; this GPU has {major}.x",
                "Triton 需要计算能力 7.0 或更高，这块 GPU 只有 {major}.x"),
    "no_triton": ("triton is not installed", "没有安装 triton"),
    "fallback": ("{reason}: falling back to the Triton interpreter on the CPU",
                 "{reason}：改用 CPU 上的 Triton 解释器"),
    "no_gpu": ("no CUDA GPU found: Triton kernels run through the interpreter (TRITON_INTERPRET=1)",
               "没有找到 CUDA GPU：Triton kernel 通过解释器运行（TRITON_INTERPRET=1）"),
    "forced": ("TRITON_INTERPRET=1 was set: grading on the CPU although a GPU is present",
               "设置了 TRITON_INTERPRET=1：虽然有 GPU，仍在 CPU 上判分"),
})

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
    notes: tuple[str | Text, ...] = field(default_factory=tuple)  # Texts: shown in the language in force

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
            return T("interpreter_label")
        return f"{self.gpu_name} (sm_{self.capability[0]}{self.capability[1]})"

    def table(self) -> str:
        rows = [
            (T("mode"), T("mode_gpu") if not self.interpreter else T("mode_interpreter")),
            (T("device"), self.gpu_name or "cpu"),
        ]
        if not self.interpreter:
            rows += [
                (T("capability"), f"{self.capability[0]}.{self.capability[1]}"),
                (T("bf16"), T("yes") if self.supports_bf16 else T("no_bf16")),
                (T("smem"), T("kib", n=(self.shared_memory_per_block or 0) // 1024)),
                (T("driver"), self.driver or "?"),
            ]
        rows += [
            (T("dtypes"), join(str(d).replace("torch.", "") for d in self.dtypes)),
            ("torch", self.torch_version),
            ("triton", self.triton_version or T("not_installed")),
            ("python", self.python_version),
        ]
        w = max(width(k) for k, _ in rows)
        lines = [f"  {ljust(k, w)}  {v}" for k, v in rows]
        lines += [f"  {T('note', note=n)}" for n in self.notes]
        return "\n".join(lines)


def _triton_version() -> str:
    try:
        import triton
        return triton.__version__
    except Exception:  # noqa: BLE001 - a broken triton install is reported, not raised
        return ""


def _gpu_usable_by_triton() -> Text | None:
    """None when Triton can compile for the GPU, else the reason it cannot."""
    major, _ = torch.cuda.get_device_capability(0)
    if major < 7:
        return T.later("old_gpu", major=major)
    if not _triton_version():
        return T.later("no_triton")
    return None


def detect(force_interpreter: bool | None = None) -> Environment:
    """Detect the environment once and switch to the interpreter when there is no usable GPU.

    TRITON_INTERPRET must be set before any @triton.jit decorator runs, so this is called by grader.setup(),
    which is the first cell of every notebook, and before any reference solution is loaded.
    """
    global _ENV
    if _ENV is not None and force_interpreter is None:
        return _ENV
    notes: list[Text] = []
    wants_interp = interpreter_requested()
    if force_interpreter is not None:
        wants_interp = force_interpreter
    gpu = torch.cuda.is_available()
    if gpu and not wants_interp:
        reason = _gpu_usable_by_triton()
        if reason:
            notes.append(T.later("fallback", reason=reason))
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
            notes.append(T.later("no_gpu"))
        elif wants_interp and force_interpreter is None:
            notes.append(T.later("forced"))
        _ENV = Environment(device="cpu", interpreter=True, triton_version=_triton_version(), notes=tuple(notes))
    if _ENV.interpreter:
        from . import safety
        safety.install_interpreter_bounds_check()
    return _ENV
