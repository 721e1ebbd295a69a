"""Grader v2: exercises are self-contained objects, the checker is generic, and what learners hit is fixed."""

import json
import math
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_mutants import mutant

import grader
from grader import diagnosis, notebooks
from grader.exercises import EXERCISES, get
from grader.exercises.attention import AttentionCase

ROOT = Path(grader.__file__).resolve().parent
ENV = grader.setup(quiet=True)


def attention(q, k, v, sm_scale=None, causal=False):
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q.to(work) @ k.to(work).transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return (torch.softmax(s, -1) @ v.to(work)).to(q.dtype)


# ---- structure -------------------------------------------------------------------------------------------------
def test_the_checker_names_no_exercise_and_no_case_internals():
    src = (ROOT / "checking.py").read_text()
    for ex_id in EXERCISES:
        assert ex_id not in src, f"checking.py mentions the exercise {ex_id}"
    assert "meta" not in src and '("m", "l")' not in src


def test_every_exercise_lives_in_its_chapter_module_and_hints_only_its_own_tags(env):
    gen = torch.Generator().manual_seed(0)
    hopper = SimpleNamespace(device="cpu", interpreter=False, capability=(9, 0), supports_bf16=True, label="fake")
    for ex in EXERCISES.values():
        assert type(ex).__module__.startswith("grader.exercises."), ex
        cases = ex.make_cases(env, gen) + ex.make_cases(hopper, gen)
        assert cases, ex.id
        tags = set().union(*(c.tags for c in cases)) | {"repeat"}
        assert set(ex.hints) <= tags, f"{ex.id} has hints for tags none of its cases carry: {set(ex.hints) - tags}"


def test_attention_cases_are_typed():
    case = get("flash_attention").make_cases(ENV, torch.Generator().manual_seed(1))[8]
    assert isinstance(case, AttentionCase) and case.layout == "bnhd" and not case.causal
    assert case.q.shape == (2, 3, 70, 64) and case.placed["q"].stride() != case.q.stride()


def test_row_softmax_is_not_told_about_attention():
    r = grader.check("row_softmax", lambda x: torch.softmax(x.float(), -1), quiet=True)
    assert not r.passed
    text = str(r)
    assert "dtype" in text and "second dot" not in text and "v's dtype" not in text


def test_online_softmax_hints_speak_of_m_and_l_only():
    for ex_id in ("online_softmax", "safe_softmax", "merge_softmax_states"):
        assert not any(re.search(r"\bacc(umulator)?\b", h) for h in get(ex_id).hints.values()), ex_id


# ---- misdiagnosis (issue item 2) ---------------------------------------------------------------------------------
def _tiled_dividing_inside(q, k, v, sm_scale=None, block_m=64, block_n=64):
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    out = torch.empty_like(q)
    for i in range(0, q.shape[-2], block_m):
        qi = q[..., i:i + block_m, :].float()
        m = torch.full(qi.shape[:-1], float("-inf"), device=q.device)
        l_ = torch.zeros(qi.shape[:-1], device=q.device)
        acc = torch.zeros(qi.shape, device=q.device)
        for j in range(0, k.shape[-2], block_n):
            s = qi @ k[..., j:j + block_n, :].float().transpose(-1, -2) * scale
            m_new = torch.maximum(m, s.amax(-1))
            alpha, p = torch.exp(m - m_new), torch.exp(s - m_new[..., None])
            l_ = l_ * alpha + p.sum(-1)
            acc = (acc * alpha[..., None] + p @ v[..., j:j + block_n, :].float()) / l_[..., None]  # the bug
            m = m_new
        out[..., i:i + block_m, :] = acc.to(q.dtype)
    return out


def test_dividing_inside_the_loop_is_named_and_not_called_a_rescaling_bug():
    r = grader.check("tiled_attention", _tiled_dividing_inside, quiet=True)
    text = str(r)
    assert not r.passed and "looks like: divided by l inside the loop" in text, text
    assert "accumulator not rescaled" not in text and "running sum not rescaled" not in text


NEW_BUGS = [
    ("acc += tl.dot(p.to(v.dtype), v)\n", "acc += tl.dot(p.to(v.dtype), v)\n        acc = acc / l_i[:, None]\n",
     "divided by l inside the loop"),
    ("p = tl.exp(s - m_new[:, None])", "p = tl.exp(s - m_i[:, None])", "exponentials against the old max"),
    ("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i * alpha + tl.sum(p, axis=0)",
     "reduced along the wrong axis"),
]


@pytest.mark.parametrize("old, new, named", NEW_BUGS, ids=[b[2] for b in NEW_BUGS])
def test_new_bug_models_name_kernel_mutants(old, new, named):
    r = grader.check("flash_attention_2d", mutant("flash_attention_2d", old, new), quiet=True)
    assert not r.passed and f"looks like: {named}" in str(r), str(r)


def _softmax_dim0(x):
    z = x.float() - x.float().amax(dim=0, keepdim=True)
    return (torch.exp(z) / torch.exp(z).sum(dim=0, keepdim=True)).to(x.dtype)


def test_softmax_over_the_wrong_axis_is_named():
    r = grader.check("safe_softmax", _softmax_dim0, quiet=True)
    assert "looks like: reduced along the wrong axis" in str(r), str(r)


@pytest.mark.parametrize("call", [lambda x: torch.softmax(x.float(), -1).to(x.dtype),
                                  lambda x: x.float().softmax(-1).to(x.dtype),
                                  lambda x: torch.nn.functional.softmax(x.float(), dim=-1).to(x.dtype),
                                  lambda x: torch.exp(x.float() - x.float().logsumexp(-1, keepdim=True)).to(x.dtype)])
def test_pytorchs_own_softmax_does_not_pass_the_softmax_exercises(call):
    r = grader.check("safe_softmax", call, quiet=True, record=False)
    assert not r.passed and all("PyTorch's" in c.problems[0] for c in r.cases), str(r)
    r = grader.check("online_softmax", lambda x, block_size=128: call(x), quiet=True, record=False)
    assert not r.passed


def test_the_forbidden_calls_are_only_recorded_inside_the_learners_call():
    r = grader.check("safe_softmax", grader.reference("safe_softmax"), quiet=True)
    assert r.passed, str(r)


def test_fp16_overflow_hint_quotes_fp16s_limit():
    r = grader.check("safe_softmax", lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), quiet=True)
    fp16 = [c for c in r.cases if c.dtype == "float16" and "large" in c.tags]
    assert fp16 and all(c.status == "FAIL" for c in fp16)
    assert any("11.1" in h for c in fp16 for h in c.hints), [c.hints for c in fp16]
    fp32 = [c for c in r.cases if c.dtype == "float32" and "large" in c.tags]
    assert all("11.1" not in h for c in fp32 for h in c.hints)


# ---- noise (item 3) ----------------------------------------------------------------------------------------------
def test_case_names_say_what_they_test():
    names = [c.name for ex in EXERCISES.values() for c in ex.make_cases(ENV, torch.Generator().manual_seed(0))]
    assert not any("seed chapter" in n for n in names)


def test_index_patterns_are_described_not_truncated():
    every_other_block = [i for i in range(512) if (i // 32) % 2]
    text = diagnosis.pattern(every_other_block, 512)
    assert "of every 64" in text and "more ranges" not in text
    assert diagnosis.pattern([3, 4, 5, 90], 100) == "3–5, 90 (of 0–99)"
    assert diagnosis.pattern([1, 7, 20, 33, 34, 61, 88], 100) is None  # scattered: nothing worth saying


# ---- time budgets from the reference (item 5) --------------------------------------------------------------------
def test_a_hang_is_stopped_quickly_and_the_report_says_how_long_the_reference_took():
    def forever(q, k, v, sm_scale=None, causal=False):
        while True:
            time.sleep(0.01)
    grader.check("naive_attention", attention, quiet=True)  # the reference's timings are measured once
    t0 = time.perf_counter()
    r = grader.check("naive_attention", forever, quiet=True)
    assert time.perf_counter() - t0 < 30
    assert "time budget" in str(r) and "the reference solution takes" in str(r)


# ---- notebook 07 grades what passed in 06 (item 6) ---------------------------------------------------------------
def test_session_code_keeps_the_latest_definitions_a_function_needs():
    history = [
        "import torch\nimport math as m",
        "def helper(x):\n    return x + 1\nq = torch.zeros(3)",
        "def helper(x):\n    return x * m.pi",
        "@staticmethod\ndef flash_attention(q, k, v):\n    out = helper(q)\n    return out",
        "r = grader.check('flash_attention', flash_attention)\nout = 5",
    ]
    code = notebooks.session_code(history, "flash_attention")
    assert "x * m.pi" in code and "x + 1" not in code
    assert "import math as m" in code and "@staticmethod" in code
    assert "grader.check" not in code and "torch.zeros" not in code and "out = 5" not in code


def test_passing_code_is_kept_and_preferred_by_load_notebook(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "kept_dir", lambda: tmp_path / "kept")
    monkeypatch.chdir(tmp_path)
    ex = get("flash_attention")
    sources = ["import torch", "def flash_attention(q, k, v, causal=False, sm_scale=None):\n"
                               "    return torch.zeros_like(q)"]
    kept = notebooks.keep_passing_code(ex, lambda: None, sources=sources)
    assert kept is None  # the lambda's name is not defined in the history
    fn = notebooks.load_source(sources[0] + "\n" + sources[1], "scratch").flash_attention
    kept = notebooks.keep_passing_code(ex, fn, sources=sources)
    assert kept == tmp_path / "kept" / "06_flash_attention.ipynb"
    assert notebooks.find_notebook("06_flash_attention") == kept
    module = grader.load_notebook("06_flash_attention")
    assert module.__notebook_path__ == kept
    notes = notebooks.provenance_notes(module.flash_attention, ex)
    assert notes == [f"graded `flash_attention` from {kept}"]


def test_grading_the_template_names_the_file_and_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "kept_dir", lambda: tmp_path / "kept")
    monkeypatch.chdir(tmp_path)
    nb06 = grader.load_notebook("06_flash_attention")
    r = grader.check("flash_attention", nb06.flash_attention, quiet=True, record=False)
    text = str(r)
    assert "06_flash_attention.ipynb" in text and "unfinished TODO" in text
    assert "grader.check(\"flash_attention\", flash_attention)" in text and str(tmp_path / "kept") in text


def test_a_pass_in_06_keeps_the_code_where_07_looks(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "kept_dir", lambda: tmp_path / "kept")
    source = notebooks.export_source(notebooks.solutions_dir() / "06_flash_attention.ipynb")
    learner = notebooks.load_source(source, "a_learners_06").flash_attention  # not the reference object itself
    monkeypatch.setattr(notebooks, "_session_sources", lambda: [source])
    r = grader.check("flash_attention", learner, quiet=True, record=False)
    assert r.passed, str(r)
    kept = tmp_path / "kept" / "06_flash_attention.ipynb"
    assert kept.exists() and str(kept) in str(r)
    cell = json.loads(kept.read_text())["cells"][0]
    assert "export" in cell["metadata"]["tags"] and "def flash_attention(" in "".join(cell["source"])


# ---- bf16 only with bf16 tensor cores (item 9) -------------------------------------------------------------------
@pytest.mark.parametrize("capability, bf16", [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_bf16_cases_need_compute_capability_8(capability, bf16):
    gpu = SimpleNamespace(device="cpu", interpreter=False, capability=capability, supports_bf16=True,
                          label="fake GPU")
    names = [c.name for c in get("flash_attention").make_cases(gpu, torch.Generator().manual_seed(0))]
    assert ("bf16" in names) == bf16 and ("bf16, causal" in names) == bf16
    assert "long sequence" in names  # an fp16 case: every GPU runs it
    assert any(c.dtype == torch.bfloat16 for c in get("flash_attention_2d").make_cases(
        gpu, torch.Generator().manual_seed(0))) == bf16


# ---- bad arguments must raise ValueError (item 10) ---------------------------------------------------------------
def _solution(ex_id):
    """The instructor's code loaded as a learner's would be (grader.reference refuses to run inside a graded call)."""
    ex = get(ex_id)
    source = notebooks.export_source(notebooks.solutions_dir() / f"{ex.notebook}.ipynb")
    return getattr(notebooks.load_source(source, f"copy_of_{ex.notebook}"), ex.function)


def test_a_wrapper_that_does_not_validate_fails_the_bad_argument_cases():
    ref = _solution("flash_attention")

    def lax(q, k, v, causal=False, sm_scale=None, **kwargs):
        try:
            return ref(q, k, v, causal=causal, sm_scale=sm_scale, **kwargs)
        except ValueError:
            return torch.zeros(1)
    r = grader.check("flash_attention", lax, quiet=True, record=False)
    bad = [c for c in r.cases if "arguments" in c.tags]
    assert len(bad) >= 8 and all(c.status == "FAIL" for c in bad)
    assert all(c.passed for c in r.cases if "arguments" not in c.tags)
    assert "expected a ValueError" in str(r) and "the wrapper must raise ValueError" in str(r)


def test_a_value_error_must_say_what_is_wrong():
    ref = _solution("flash_attention")

    def vague(q, k, v, causal=False, sm_scale=None):
        try:
            return ref(q, k, v, causal=causal, sm_scale=sm_scale)
        except ValueError:
            raise ValueError("bad input") from None
    r = grader.check("flash_attention", vague, quiet=True, record=False)
    assert "does not say what is wrong" in str(r)


# ---- reliability -------------------------------------------------------------------------------------------------
def test_a_function_that_caches_by_shape_fails_the_repeated_case():
    cache = {}

    def cached(q, k, v, sm_scale=None, causal=False):
        key = (q.shape, k.shape, causal, sm_scale)
        if key not in cache:
            cache[key] = attention(q, k, v, sm_scale, causal)
        return cache[key]
    r = grader.check("naive_attention", cached, quiet=True, record=False)
    failed = [c for c in r.cases if not c.passed]
    assert [c.name for c in failed] == [r.cases[0].name + ", again with fresh values"]
    assert "is a result kept from an earlier call" in str(r)


@pytest.mark.parametrize("seed", [2 ** 64, -1, 1.5, "7", True])
def test_a_bad_seed_is_a_clear_value_error(seed):
    with pytest.raises(ValueError, match="seed must be an integer"):
        grader.check("naive_attention", attention, seed=seed, quiet=True)


# ---- checks that cannot be gamed ---------------------------------------------------------------------------------
def test_a_kernel_exercise_needs_a_kernel():
    r = grader.check("row_softmax", lambda x: torch.softmax(x.float(), -1).to(x.dtype), quiet=True, record=False)
    assert not r.passed and all(not c.passed for c in r.cases)
    assert "no Triton kernel ran" in str(r)
    assert grader.check("row_softmax", grader.reference("row_softmax"), quiet=True).passed


def test_the_reference_is_not_available_inside_a_graded_call():
    ref = grader.reference("naive_attention")
    r = grader.check("naive_attention", lambda q, k, v, **kw: ref(q, k, v, **kw), quiet=True, record=False)
    assert not r.passed and "not available inside a function being graded" in str(r)
    r = grader.check("naive_attention", lambda q, k, v, **kw: grader.reference("naive_attention")(q, k, v, **kw),
                     quiet=True, record=False)
    assert not r.passed and "not available inside a function being graded" in str(r)
    assert grader.reference("naive_attention") is ref  # one object per exercise: its id() is never reused
    assert ref(*[torch.randn(1, 1, 4, 8) for _ in range(3)]).shape == (1, 1, 4, 8)  # outside a graded call it works


def test_an_online_softmax_that_reduces_whole_rows_fails_and_says_why():
    def two_pass(x, block_size=128):
        xf = x.float()
        m = xf.amax(-1)  # the whole row at once: not online
        total = sum(torch.exp(xf[..., s:s + block_size] - m[..., None]).sum(-1)
                    for s in range(0, xf.shape[-1], block_size))
        return (torch.exp(xf - m[..., None]) / total[..., None]).to(x.dtype)

    r = grader.check("online_softmax", two_pass, quiet=True, record=False)
    failed = [c for c in r.cases if not c.passed]
    assert failed and all("one block at a time" in c.problems[0] for c in failed), str(r)
    assert all(c.passed for c in r.cases if "multi-block" not in c.tags)  # a row within one block may be whole
    # no "only the multi-block cases fail" hint about a call it may not make; the pointer to grader.hint stays
    assert [str(h) for h in r.hints if "grader.hint(" not in str(h)] == [], r.hints
