"""The plan's module branches and the sections they run as, checked on the CPU (no launch:
the steps only record themselves)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.engine.plan import Plan, Step, inherit, sections


def _plan():
    return Plan(np)


def _step(plan, name):
    return plan.add(lambda: None, name)


def _names(items):
    return [[[s.label for s in path] for path in item] if isinstance(item, list) else item.label
            for item in items]


def test_a_residual_blocks_branches_run_as_one_section_between_the_steps_around_it():
    plan = _plan()
    _step(plan, "stem")
    par = plan.branches()
    with par.branch():
        _step(plan, "shortcut")
    with par.branch() as i:
        assert i == 1
        _step(plan, "conv1a")
        _step(plan, "conv1b")
    _step(plan, "conv2")
    assert _names(sections(plan.steps)) == ["stem", [["shortcut"], ["conv1a", "conv1b"]],
                                            "conv2"]


def test_a_branch_re_entered_later_keeps_its_place_and_bad_indices_are_refused():
    plan = _plan()
    par = plan.branches()
    for name in ("a", "b", "c"):
        with par.branch():
            _step(plan, name)
    for i, name in enumerate(("copy a", "copy b", "copy c")):
        with par.branch(i):
            _step(plan, name)
    assert _names(sections(plan.steps)) == [[["a", "copy a"], ["b", "copy b"],
                                             ["c", "copy c"]]]
    for bad in (3, -1):
        with pytest.raises(ValueError, match="index"):
            with par.branch(bad):
                pass


def test_a_module_inside_a_branch_runs_as_part_of_it():
    plan = _plan()
    outer = plan.branches()
    with outer.branch():
        inner = plan.branches()
        for name in ("x", "y"):
            with inner.branch():
                _step(plan, name)
    with outer.branch():
        _step(plan, "z")
    assert _names(sections(plan.steps)) == [[["x", "y"], ["z"]]]


def test_one_branch_with_steps_is_no_section():
    plan = _plan()
    par = plan.branches()
    with par.branch():
        pass                       # an identity shortcut plans nothing
    with par.branch():
        _step(plan, "conv1")
    _step(plan, "conv2")
    assert _names(sections(plan.steps)) == ["conv1", "conv2"]


def test_a_step_outside_the_branches_splits_a_section_and_sections_of_two_modules_stay_apart():
    plan = _plan()
    first, second = plan.branches(), plan.branches()
    for par, names in ((first, ("a0", "a1")), (second, ("b0", "b1"))):
        for name in names:
            with par.branch():
                _step(plan, name)
    assert _names(sections(plan.steps)) == [[["a0"], ["a1"]], [["b0"], ["b1"]]]
    plan.steps.insert(1, Step(lambda: None, "fused"))
    assert _names(sections(plan.steps)) == ["a0", "fused", "a1", [["b0"], ["b1"]]]


def test_a_fused_step_keeps_a_branch_only_its_parts_shared():
    plan = _plan()
    par = plan.branches()
    with par.branch():
        a, b = _step(plan, "a"), _step(plan, "b")
    with par.branch():
        c = _step(plan, "c")
    outside = _step(plan, "d")
    assert inherit(Step(lambda: None), a, b).branch == a.branch
    assert inherit(Step(lambda: None), b, c).branch is None
    assert inherit(Step(lambda: None), c, outside).branch is None


def test_a_side_plans_steps_join_the_branch_being_planned():
    plan = _plan()
    par = plan.branches()
    with par.branch():
        _step(plan, "shortcut")
    with par.branch():
        side = plan.side()
        _step(side, "part 1")
        _step(side, "part 2")
        plan.adopt(side)
    assert _names(sections(plan.steps)) == [[["shortcut"], ["part 1", "part 2"]]]


def _section_plan():
    from tensorconv.cuda import kernel_ref

    plan = _plan()
    par = plan.branches()
    for name in ("shortcut", "conv1"):
        with par.branch():
            plan.add(lambda: None, f"{name} (8, 8, 1, 1) on (1, 8, 4, 4)",
                     [kernel_ref("direct_conv.cu", "conv2d_direct_fwd<8, 1, 1>")])
    _step(plan, "conv2")
    return plan


def test_an_untuned_plan_runs_its_sections_side_by_side_unless_a_verdict_says_otherwise(
        tmp_path, monkeypatch):
    from tensorconv.engine import passes
    from tensorconv.engine.choice import Choice

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    plan = _section_plan()
    passes.choose_sections(plan)
    assert isinstance(sections(plan.steps)[0], list)
    asked = []
    monkeypatch.setattr(passes, "one_launch_or_parts",
                        lambda plan, kind, files, problem, **kw: asked.append(
                            (kind, files, problem)) or Choice(False))
    plan = _section_plan()
    passes.choose_sections(plan)
    assert _names(sections(plan.steps)) == ["shortcut (8, 8, 1, 1) on (1, 8, 4, 4)",
                                            "conv1 (8, 8, 1, 1) on (1, 8, 4, 4)", "conv2"]
    (kind, files, problem), = asked
    assert kind == "branches" and files == ["direct_conv.cu"]
    assert problem == "shortcut (8, 8, 1, 1) on (1, 8, 4, 4) || conv1 (8, 8, 1, 1) on (1, 8, 4, 4)"
    plan = _section_plan()
    plan.concurrent = False
    passes.choose_sections(plan)            # one stream anyway: nothing asked
    assert len(asked) == 1


def test_sections_left_side_by_side_face_the_whole_plan_in_order(tmp_path, monkeypatch):
    """After each section's verdict, the plan with the sections left side by side is
    weighed against every step in order: asked once, about the whole plan (every kernel
    file, a key that names the steps and sections), timed as the engine's graph runs; its
    "in order" verdict clears every branch, a side-by-side one keeps them."""
    from tensorconv.engine import passes
    from tensorconv.engine.choice import Choice

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    asked = []

    def choose(verdicts):
        def one_launch_or_parts(plan, kind, files, problem, **kw):
            asked.append((kind, files, problem, kw["programmatic"], kw["launch"](None),
                          kw["parts"]()))
            return Choice(True, kw["default"]) if verdicts[kind] else Choice(False)
        monkeypatch.setattr(passes, "one_launch_or_parts", one_launch_or_parts)

    choose({"branches": True, "plan_streams": False})
    plan = _section_plan()
    plan.programmatic = True
    ran = []
    for step in plan.steps:
        step.run = lambda label=step.label: ran.append(label)
    passes.choose_sections(plan)
    assert [a[0] for a in asked] == ["branches", "plan_streams"]
    kind, files, problem, programmatic, whole, (in_order,) = asked[1]
    assert files == ["direct_conv.cu"] and programmatic and asked[0][3]
    assert problem.startswith("3 steps, 1 sections, ")
    assert len(whole.kernels) == len(in_order.kernels) == 2
    in_order.run()
    assert ran == [s.label for s in plan.steps]
    assert _names(sections(plan.steps)) == ["shortcut (8, 8, 1, 1) on (1, 8, 4, 4)",
                                            "conv1 (8, 8, 1, 1) on (1, 8, 4, 4)", "conv2"]

    asked.clear()
    choose({"branches": True, "plan_streams": True})
    plan = _section_plan()
    passes.choose_sections(plan)
    assert [a[0] for a in asked] == ["branches", "plan_streams"] and not asked[1][3]
    assert isinstance(sections(plan.steps)[0], list)
    other = _section_plan()
    other.steps[-1].label = "conv2 on another tile"
    passes.choose_sections(other)
    assert asked[3][2] != asked[1][2]           # another plan: another key

    asked.clear()
    choose({"branches": False, "plan_streams": True})
    passes.choose_sections(_section_plan())
    assert [a[0] for a in asked] == ["branches"]   # no section left: nothing to weigh



def test_a_step_gives_way_to_its_fallback_only_where_the_whole_plan_is_faster_so(
        tmp_path, monkeypatch):
    """Each fallback of a step is weighed once, in plan order, as the whole plan as it
    stands against the whole plan with the fallback in the step's place (timed as the
    engine's graph runs; the key names both and every step); a "parts" verdict puts the
    fallback, in the step's branch, in its place, and the step's next fallback faces it;
    steps without one are not asked about; untuned and unstored, the plan keeps its steps."""
    from tensorconv.cuda import kernel_ref
    from tensorconv.engine import passes
    from tensorconv.engine.choice import Choice

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    ran = []

    def plan_with_fallbacks():
        plan = _plan()
        plan.programmatic, plan.concurrent = True, False    # no streams on the CPU
        par = plan.branches()
        made = []
        for name in ("shortcut", "conv1"):
            with par.branch():
                made.append(plan.add(lambda n=name: ran.append(n), f"{name} unrolled",
                                     [kernel_ref("sparse_unrolled_direct.cu", "k<0>")]))
        made.append(plan.add(lambda: ran.append("conv2"), "conv2 unrolled",
                             [kernel_ref("sparse_unrolled.cu", "k<0>")]))
        for step in made[1:]:
            step.fallbacks = (Step(lambda n=step.label: ran.append(f"{n} fallback"),
                                   f"{step.label} fallback", (kernel_ref("sparse_conv.cu", "t"),)),)
        made[2].fallbacks += (Step(lambda: ran.append("conv2 dense"), "conv2 dense",
                                   (kernel_ref("direct_conv.cu", "d"),)),)
        return plan

    plan = plan_with_fallbacks()
    passes.choose_fallbacks(plan)                     # untuned, nothing stored: as planned
    assert [s.label for s in plan.steps] == ["shortcut unrolled", "conv1 unrolled",
                                             "conv2 unrolled"]
    asked = []

    def one_launch_or_parts(plan, kind, files, problem, **kw):
        asked.append((kind, files, problem, kw["programmatic"]))
        ran.clear()
        kw["launch"](None).run()
        as_planned = list(ran)
        ran.clear()
        (other,) = kw["parts"]()
        other.run()
        asked[-1] += (as_planned, list(ran), other.kernels)
        return Choice(False) if "conv1" in problem or "dense" in problem else \
            Choice(True, kw["default"])
    monkeypatch.setattr(passes, "one_launch_or_parts", one_launch_or_parts)
    plan = plan_with_fallbacks()
    passes.choose_fallbacks(plan)
    assert [a[0] for a in asked] == ["fallback"] * 3 and all(a[3] for a in asked)
    (_, files, problem, _, as_planned, other, kernels) = asked[0]
    assert files == ["sparse_conv.cu", "sparse_unrolled.cu", "sparse_unrolled_direct.cu"]
    assert problem.startswith("step 1: conv1 unrolled or conv1 unrolled fallback | 3 steps, ")
    assert as_planned == ["shortcut", "conv1", "conv2"]
    assert other == ["shortcut", "conv1 unrolled fallback", "conv2"]
    assert len(kernels) == 4
    # the second weighs the plan as decided so far: conv1's fallback in it
    assert asked[1][4] == ["shortcut", "conv1 unrolled fallback", "conv2"]
    assert asked[1][5] == ["shortcut", "conv1 unrolled fallback", "conv2 unrolled fallback"]
    assert asked[1][2].split(" | ")[1] != problem.split(" | ")[1]   # another plan: another key
    # conv2's second fallback weighed against the plan as it stands: conv2 kept
    assert asked[2][2].startswith("step 2: conv2 unrolled or conv2 dense | ")
    assert asked[2][5] == ["shortcut", "conv1 unrolled fallback", "conv2 dense"]
    assert [s.label for s in plan.steps] == ["shortcut unrolled", "conv1 unrolled fallback",
                                             "conv2 dense"]
    assert plan.steps[1].branch == plan.steps[0].branch[:1] + (1,)  # conv1's branch kept
    assert isinstance(sections(plan.steps)[0], list)
