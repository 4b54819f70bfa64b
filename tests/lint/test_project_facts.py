"""ProjectQuestions alone: which calls may run another file's function, and what was asked."""

from __future__ import annotations

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.budget import Budget
from torchpact.lint.analysis.definitions import Definitions
from torchpact.lint.analysis.imports import Imports
from torchpact.lint.analysis.project_facts import ProjectQuestions
from torchpact.lint.project import ZERO_GRAD, FileSummary, ProjectFacts
from tests.lint._tree import call_of, indexed

CODE = """
import utils

def local():
    pass

def train(opt):
    reset(opt)
    utils.clear(opt)
    local()
    opt.zero_grad()
"""


def test_callees_of_other_modules_and_the_facts_asked_of_them():
    nav = indexed(CODE)
    names = Imports(nav)
    project = ProjectFacts([FileSummary(facts={"reset": [ZERO_GRAD]})])
    questions = ProjectQuestions(project, names, Definitions(nav, names, Bindings(nav, Budget())))
    assert [questions.callee(call_of(nav, n)) for n in ("reset", "clear", "local", "zero_grad")] == [
        "reset", "clear", None, None]
    assert questions.calls_function_that(call_of(nav, "reset"), ZERO_GRAD)
    assert not questions.calls_function_that(call_of(nav, "clear"), ZERO_GRAD)
    assert not questions.calls_function_that(call_of(nav, "local"), ZERO_GRAD)
    assert questions.asked == {("reset", ZERO_GRAD), ("clear", ZERO_GRAD)}
