"""Whether code runs on some ranks only: under a test of the rank, or after an early rank exit."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.following import follows_definitions
from torchpact.lint.analysis.navigation import Navigation

RANK_WORDS = re.compile(
    r"(^|_)(rank|local_rank|global_rank|node_rank|is_main_process|is_local_main_process|"
    r"is_world_process_zero|is_local_process_zero|is_global_zero|is_master|master_process|"
    r"is_main|main_process|is_rank_zero|rank_zero|rank0|is_primary|should_save|"
    r"is_world_master|is_local_master|is_global_master|world_master|world_process_zero|local_process_zero|"
    r"global_process_zero)($|_)",
    re.I,
)
# Rank words that are an index (true on every rank but 0), not a rank-0 predicate (`is_main_process`).
RANK_INDEX = re.compile(
    r"^(get_rank|get_global_rank|get_local_rank|get_node_local_rank|rank|local_rank|global_rank|node_rank|"
    r"process_index|local_process_index|global_process_index|gpu|gpu_id|gpu_idx|gpu_index|device_id|device_idx|"
    r"proc_id|proc_idx|process_id|process_idx)$", re.I)
ZERO, OTHERS = "zero", "others"  # the ranks a condition is true on: rank 0 only (or no job), or others too


def mentions_rank(expr: ast.AST) -> bool:
    """Whether a name, attribute or string key in ``expr`` speaks of the rank (``rank``, ``is_main_process``,
    ``kwargs["rank"]``...)."""
    for node in ast.walk(expr):
        name = _rank_name(node)
        if name and RANK_WORDS.search(name):
            return True
    return False


def _rank_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _rank_name(node.func)
    if isinstance(node, ast.Subscript):
        key = node.slice
        return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
    return None


class RankGuards:
    """The rank tests that guard the nodes of one file."""

    def __init__(self, navigation: Navigation, bindings: Bindings):
        self._navigation = navigation
        self._bindings = bindings

    def guarded(self, node: ast.AST) -> bool:
        """Whether ``node`` only runs on some ranks: under a rank test, or after an early rank exit."""
        return self._walk(node, lambda test, taken: True, lambda test: True, whole_file=True)

    def rank_zero_only(self, node: ast.AST) -> bool:
        """Whether ``node`` runs on rank 0 only (or outside a distributed job): it sits in the branch of a rank
        test that only rank 0 takes, after an early exit that every other rank takes, or in a function whose
        decorator or name says rank 0. A test that is true on other ranks as well (``rank != 0``,
        ``rank == 0 or epoch % 5 == 0``) guards nothing here; one that names the rank in a form not read is
        taken as a rank-0 test."""
        def branch(test: ast.AST, taken: bool) -> bool:
            return (self.ranks_passing(test) != OTHERS) if taken else (self.ranks_passing(test) == OTHERS)

        return self._walk(node, branch, lambda test: self.ranks_passing(test) != ZERO, whole_file=False)

    def _walk(self, node: ast.AST, branch: Callable[[ast.AST, bool], bool], exit_test: Callable[[ast.AST], bool],
              whole_file: bool) -> bool:
        """Whether a rank test on the way from ``node`` up guards it: the branch of an ``if`` that holds it
        (``branch(test, in_body)``), an earlier ``if`` of its block that exits (``exit_test(test)``), or a
        function around it whose decorator or name speaks of ranks; past the first function only when
        ``whole_file``."""
        child = node
        for anc in self._navigation.ancestors(node):
            if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test and self.tests_rank(anc.test):
                in_body = child is anc.body if isinstance(anc, ast.IfExp) else child in anc.body
                if branch(anc.test, in_body):
                    return True
            body = getattr(anc, "body", None)
            if isinstance(body, list) and child in body:
                for stmt in body[: body.index(child)]:
                    if (isinstance(stmt, ast.If) and _exits(stmt.body) and self.tests_rank(stmt.test)
                            and exit_test(stmt.test)):
                        return True
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(mentions_rank(d) for d in anc.decorator_list) or RANK_WORDS.search(anc.name):
                    return True
                if not whole_file:
                    return False
            child = anc
        return False

    @follows_definitions(None)
    def ranks_passing(self, test: ast.AST) -> str | None:
        """On which ranks ``test`` is true: ZERO (rank 0 only, or no distributed job), OTHERS (ranks other than
        0 as well), None (not read)."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.ranks_passing(test.operand)
            return {ZERO: OTHERS, OTHERS: ZERO}.get(inner) if inner else None
        if isinstance(test, ast.BoolOp):
            parts = [self.ranks_passing(v) if self.tests_rank(v) else ZERO if _no_job(v) else OTHERS
                     for v in test.values]
            if isinstance(test.op, ast.And):  # one rank-0 conjunct is enough
                return ZERO if ZERO in parts else OTHERS if OTHERS in parts else None
            return OTHERS if OTHERS in parts else ZERO if all(p == ZERO for p in parts) else None
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return _compare_passing(test)
        name = _rank_name(test)
        if name and RANK_INDEX.match(name):
            return OTHERS  # `if rank:` is true on every rank but 0
        if name and RANK_WORDS.search(name):
            return ZERO  # `is_main_process`, `accelerator.is_local_main_process`, `self.is_world_master()`
        if isinstance(test, (ast.Name, ast.Attribute)):  # a flag bound from a rank test
            passing = {self.ranks_passing(v) for _, v in self._bindings.bindings(test) if v is not None}
            return passing.pop() if len(passing) == 1 else OTHERS if OTHERS in passing else None
        return None

    def tests_rank(self, test: ast.AST) -> bool:
        """Whether a condition depends on the rank: it names one, or a flag bound from one
        (``args.save_logs = args.logs and is_master(args)`` ... ``if args.save_logs:``)."""
        if mentions_rank(test):
            return True
        for node in ast.walk(test):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                if any(v is not None and mentions_rank(v) for _, v in self._bindings.bindings(node)):
                    return True
        return False


def _no_job(test: ast.AST) -> bool:
    """A test true only outside a distributed job: ``not args.distributed``, ``not dist.is_initialized()``,
    ``world_size == 1``, ``"rank" not in kwargs``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        name = _rank_name(test.operand)
        return bool(name and _JOB_FLAG.search(name))
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn):
        key = test.left
        return isinstance(key, ast.Constant) and isinstance(key.value, str) and bool(RANK_WORDS.search(key.value))
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        name, sizes = _rank_name(test.left), _constant_ints(test.comparators[0])
        if name and _JOB_SIZE.search(name) and len(sizes) == 1:
            op, size = test.ops[0], sizes[0]
            return (isinstance(op, ast.Eq) and size <= 1 or isinstance(op, ast.LtE) and size <= 1
                    or isinstance(op, ast.Lt) and size <= 2)
    return False


_JOB_FLAG = re.compile(r"(^|_)(distributed|is_initialized|is_available|ddp|use_ddp|multiprocessing_distributed|"
                       r"multi_gpu)$", re.I)
_JOB_SIZE = re.compile(r"(^|_)(world_size|get_world_size|num_processes|n_gpu|n_gpus|num_gpus|ngpus|nprocs)$", re.I)


def _compare_passing(test: ast.Compare) -> str | None:
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if _rank_name(right) and isinstance(left, ast.Constant):
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
    ranks = _constant_ints(right)
    if not ranks or not _rank_name(left):
        return None
    if isinstance(op, (ast.Eq, ast.In, ast.Is)):
        return ZERO if max(ranks) <= 0 else None  # `rank == 0`, `local_rank in (-1, 0)`, `local_rank == -1`
    if isinstance(op, (ast.LtE, ast.Lt)):
        return ZERO if max(ranks) - isinstance(op, ast.Lt) <= 0 else OTHERS
    return OTHERS  # `rank != 0`, `rank > 0`, `rank not in (-1, 0)`


def _constant_ints(expr: ast.AST) -> list[int]:
    values = expr.elts if isinstance(expr, (ast.Tuple, ast.List, ast.Set)) else [expr]
    out = []
    for v in values:
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.USub) and isinstance(v.operand, ast.Constant):
            v = ast.Constant(-v.operand.value) if isinstance(v.operand.value, int) else v
        if isinstance(v, ast.Constant) and isinstance(v.value, int) and not isinstance(v.value, bool):
            out.append(v.value)
    return out if len(out) == len(values) else []


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue)) or (
        bool(body) and isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Call)
        and isinstance(body[-1].value.func, (ast.Name, ast.Attribute))
        and (getattr(body[-1].value.func, "id", None)
             or getattr(body[-1].value.func, "attr", None)) in ("exit", "_exit")
    )
