"""What every exercise is made of: typed cases, a judge, hints and bug models. Knows no exercise by name.

An exercise is an `Exercise` object in its chapter's module. It says how it is called (`signature`), which cases
grade it (`case_builders`: one builder per case, each drawing fresh random inputs from the run's generator), how
an output is judged (`judge`), what to say when only the cases with some tag fail (`hints`) and which classic
mistakes to simulate when an output is wrong (`diagnose`). checking.py runs that generically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import diagnosis
from ..environment import Environment
from ..safety import Guarded, guarded_copy, inverse_perm
from ..tolerances import tolerance

#: a case builder: draws the case's inputs from the generator (called lazily, in order, once per run)
CaseBuilder = Callable[[torch.Generator], "Case"]


@dataclass
class Case:
    """One call of the learner's function and what the answer is. Chapters subclass it with what they need."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expected: Any = None  # fp64 tensor(s) or plain Python values
    dtype: torch.dtype | None = None  # the dtype the output must have (and whose tolerance applies)
    shapes: str = ""
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # checked for in-place modification
    guards: list[Guarded] = field(default_factory=list)
    tags: frozenset[str] = frozenset()
    #: the call must raise this exception type (argument validation) instead of returning
    raises: type[Exception] | None = None
    #: ... with a message that contains one of these words (the argument it is about)
    mentions: tuple[str, ...] = ()
    #: tensors the exercise's `invoke` needs besides the arguments (never the answer: a submission graded in a
    #: child process receives args, kwargs and these, nothing else of the case)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def call_args(self) -> tuple[tuple, dict]:
        return self.args, self.kwargs


@dataclass(frozen=True)
class BugModel:
    """A classic mistake, simulated in fp64 on the case's inputs: 'looks like: name — why'."""

    name: str
    why: str
    simulate: Callable[[], torch.Tensor]


def fmt_dtype(d: torch.dtype | None) -> str:
    return str(d).replace("torch.", "") if d is not None else "-"


def randn(shape, gen: torch.Generator, dtype: torch.dtype, device: str, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)


def draw_int(gen: torch.Generator, lo: int, hi: int) -> int:
    """An integer from lo to hi inclusive, from the run's generator."""
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def draw_choice(gen: torch.Generator, options: Sequence):
    return options[draw_int(gen, 0, len(options) - 1)]


def dtype_tag(dtype: torch.dtype) -> str:
    return f"dtype:{fmt_dtype(dtype)}"


def place(t: torch.Tensor, name: str, guard: bool, perm: tuple[int, ...] | None = None
          ) -> tuple[torch.Tensor, list[Guarded]]:
    """A copy of t for the learner: inside NaN guard regions when `guard`, laid out as t.permute(perm) if given."""
    if guard:
        view, g = guarded_copy(t, name, perm)
        return view, [g]
    if perm:
        return t.permute(perm).contiguous().permute(inverse_perm(perm)), []
    return t.clone(), []


def bf16_graded(env: Environment) -> bool:
    """bf16 cases only where the GPU has bf16 tensor cores (sm_80+): torch counts emulation on older GPUs as support."""
    return not env.interpreter and env.capability is not None and tuple(env.capability) >= (8, 0)


def on(env: Environment, gpu_value, interpreter_value):
    """Sizes shrink on the interpreter, which is slow."""
    return interpreter_value if env.interpreter else gpu_value


# --------------------------------------------------------------------------------------------------- judging
def tensor_like(out: Any, ref: torch.Tensor, problems: list[str], label: str, device: str) -> bool:
    """A tensor of ref's shape on the inputs' device; otherwise say what it is instead."""
    if not isinstance(out, torch.Tensor):
        problems.append(f"{label}: expected a torch.Tensor, got {type(out).__name__}"
                        + (" (did you forget to return it?)" if out is None else ""))
        return False
    if tuple(out.shape) != tuple(ref.shape):
        problems.append(f"{label}: wrong shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        return False
    if out.device.type != device:
        problems.append(f"{label}: on device '{out.device}', expected '{device}' (the inputs' device)")
        return False
    return True


class Exercise:
    """An exercise: override `case_builders`; override `judge`, `diagnose`, `nonfinite_hint` where needed."""

    #: "only cases tagged T fail" -> this hint. Only concepts this exercise's code has.
    hints: dict[str, str] = {}
    #: guard every allocation the function makes (a kernel can write out of bounds)
    triton: bool = False
    #: per-case time budget when no reference timing is available, in seconds
    budget_s: float = 60.0
    #: keep the learner's passing code where later notebooks look for it (grader.notebooks.keep_passing_code)
    keep_on_pass: bool = False

    def __init__(self, id: str, title: str, notebook: str, function: str, signature: str) -> None:
        self.id, self.title, self.notebook, self.function, self.signature = id, title, notebook, function, signature

    def __repr__(self) -> str:
        return f"<exercise {self.id} ({self.notebook})>"

    def case_builders(self, env: Environment) -> list[CaseBuilder]:
        raise NotImplementedError

    def hidden_case_builders(self, env: Environment) -> list[CaseBuilder]:
        """Cases only batch grading (python -m grader.grade) adds, e.g. sizes drawn at random: none by default."""
        return []

    def invoke(self, fn: Callable, args: tuple, kwargs: dict, extra: dict[str, torch.Tensor]) -> Any:
        """What one case runs of the learner's code; its value is what `judge` gets. Override when a case runs
        more than the call (autograd: the backward too). Runs in the learner's process, so it must not need the
        answer."""
        return fn(*args, **kwargs)

    def make_cases(self, env: Environment, gen: torch.Generator) -> list[Case]:
        """Every case of one run (tests and calibration use this; grader.check builds them one at a time)."""
        return [build(gen) for build in self.case_builders(env)]

    def repeat_builder(self, builders: list[CaseBuilder]) -> CaseBuilder | None:
        """A case that repeats the first case's shapes with fresh values: a function that caches by shape fails it."""
        if not builders:
            return None
        first = builders[0]

        def again(gen: torch.Generator) -> Case:
            case = first(gen)
            case.name = f"{case.name}, again with fresh values"
            case.tags = case.tags | {"repeat"}
            return case
        return again

    # -- judging ---------------------------------------------------------------------------------------------
    def judge(self, out: Any, case: Case, res, device: str) -> bool:
        """Default: one tensor, judged against case.expected at case.dtype's tolerance."""
        return self.judge_tensor(out, case.expected, case, res, "output", self.axis_names(case), device)

    def axis_names(self, case: Case) -> tuple[str, ...]:
        ref = case.expected
        names = {2: ("rows", "columns"), 3: ("dim 0", "rows", "columns"), 1: ("elements",)}
        return names.get(ref.dim(), tuple(f"dim {i}" for i in range(ref.dim())))

    def diagnose(self, out64: torch.Tensor, case: Case, wrong: torch.Tensor) -> list[str]:
        """Hints for an output that is wrong at `wrong`: where, and which simulated bug explains it."""
        return []

    def nonfinite_hint(self, case: Case) -> str:
        if case.guards:
            return ("the grader surrounds the inputs with NaN-filled guard regions and fills tensors you allocate "
                    "with torch.empty with NaN, so NaN in the output means a load past the end of a tensor "
                    "without a mask, or output elements that were never written; otherwise look for -inf − (-inf) "
                    "or 0/0")
        return "look for -inf − (-inf) (a fully masked row or an empty state) or 0/0"

    def judge_tensor(self, out: Any, ref: torch.Tensor, case: Case, res, label: str,
                     axis_names: Sequence[str], device: str) -> bool:
        if not tensor_like(out, ref, res.problems, label, device):
            return False
        if case.dtype is not None and out.dtype != case.dtype:
            res.problems.append(f"{label}: dtype {fmt_dtype(out.dtype)}, expected {fmt_dtype(case.dtype)} "
                                "(return the input's dtype)")
            return False
        out64 = out.detach().to(torch.float64).cpu()
        ref64 = ref.to(torch.float64).cpu()
        finite_ref = torch.isfinite(ref64)
        bad_nonfinite = ~torch.isfinite(out64) & finite_ref
        diff = (out64 - ref64).abs().where(finite_ref, torch.zeros_like(out64))
        res.tol = tolerance(case.dtype)
        both = finite_ref & torch.isfinite(out64)
        res.max_abs = float(diff[both].max()) if both.any() else float("nan")
        denom = float(ref64[finite_ref].norm()) if finite_ref.any() else 0.0
        res.rel_err = float(diff[both].norm()) / denom if denom > 0 else None
        ok = diagnosis.close(out64, ref64, case.dtype)
        allowed = res.tol[0] + res.tol[1] * ref64.abs()
        res.ratio = float((diff / allowed)[both].max()) if both.any() else None
        if bad_nonfinite.any():
            n = int(bad_nonfinite.sum())
            kind = "NaN" if torch.isnan(out64).any() else "Inf"
            res.max_abs = float("nan")
            spots = diagnosis.where(bad_nonfinite, axis_names)
            res.problems.append(f"{label}: {n} {kind} value(s) where the answer is finite"
                                + (f" ({'; '.join(spots)})" if spots else ""))
            res.hints.append(self.nonfinite_hint(case))
        if not ok.all():
            if not bad_nonfinite.any():
                res.problems.append(f"{label}: {int((~ok).sum())} of {ok.numel()} elements outside the tolerance")
            spots = diagnosis.where(~ok, axis_names)
            if spots:
                res.hints.append("mismatches only in " + "; ".join(spots))
            res.hints += self.diagnose(out64, case, ~ok)
            return False
        return not bad_nonfinite.any()


def with_inputs(case: Case, *, guard: bool = False, **tensors: torch.Tensor) -> Case:
    """Hand the learner copies of `tensors` (positional, before case.args), inside NaN guard regions when `guard`,
    and watch them for in-place writes."""
    placed = {}
    for name, t in tensors.items():
        placed[name], guards = place(t, name, guard)
        case.guards += guards
    case.args = tuple(placed.values()) + case.args
    case.inputs = placed
    return case
