"""Lints one file: parse once, walk once, hand each enabled rule its nodes, collect findings and fixes."""

from __future__ import annotations

import ast
import gc
import os
import unicodedata
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from torchpact.config import Config, is_suppressed
from torchpact.findings import LINT_EVIDENCE, Category, Finding, Severity, input_finding, severity_cap
from torchpact.lint.context import BudgetExceeded, FileContext
from torchpact.lint.kinds import MAY, MUST
from torchpact.lint.preview import Gate
from torchpact.lint.edits import Edit
from torchpact.lint.project import ProjectFacts, mentions_facts, summarize_tree
from torchpact.lint.noqa import UNUSED_NOQA, unused
from torchpact.lint.registry import RuleSpec, declared_codes, rule_specs
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.source import Source, SourceError, read_source, source_from_bytes

MAX_FIX_PASSES = 4
# CPU seconds one rule may spend on one file; past it the rule stops there with a TP002 warning
# (its findings in that file may be incomplete, so a run that lost some must not look clean).
# ``TORCHPACT_RULE_BUDGET`` (seconds) sets another budget: more for huge generated files, less to test.
RULE_BUDGET_S = 1.0
BUDGET_ENV = "TORCHPACT_RULE_BUDGET"
INTERNAL_CODE = "TP002"
# extra["stopped"] of a TP002 finding: why its rule did not finish the file
STOPPED_BUDGET, STOPPED_ERROR = "out of time", "failed"


def rule_budget() -> float:
    """The budget in force: ``TORCHPACT_RULE_BUDGET`` when set (the command line checks it), else RULE_BUDGET_S."""
    raw = os.environ.get(BUDGET_ENV)
    if raw:
        try:
            return float(raw)
        except ValueError:
            pass
    return RULE_BUDGET_S


@dataclass
class FileResult:
    """What linting one file produced. ``fixed`` is the new text when fixes changed it."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    original: str | None = None
    fixed: str | None = None
    fixes_applied: int = 0
    lines: int = 0
    # Facts of this file's functions for the other files, and what its rules asked about theirs.
    summary: dict[str, Any] = field(default_factory=dict)
    asked: list[Any] = field(default_factory=list)
    # Findings the preview gate kept out (lint/preview.py).
    hidden: int = 0
    # (finding, its fix's edits, unsafe) for each reported finding that has a fix, edits as offsets into
    # the linted text (the editor's code actions; the first pass's, before any fix is applied).
    fixes: list[tuple[Finding, tuple[Edit, ...], bool]] = field(default_factory=list)


class RuleSelection:
    """The rules each configuration enables, worked out once per (select, ignore) for configurations
    without per-file ignores; owned by the lint run that uses it (one per run, and per worker)."""

    def __init__(self) -> None:
        self._enabled: dict[tuple[Any, ...], list[RuleSpec]] = {}

    def enabled(self, config: Config, path: str) -> list[RuleSpec]:
        if config.per_file_ignores:
            return enabled_rules(config, path)
        key = (tuple(config.select), tuple(config.ignore))
        specs = self._enabled.get(key)
        if specs is None:
            specs = self._enabled[key] = enabled_rules(config, path)
        return specs


def enabled_rules(config: Config, path: str) -> list[RuleSpec]:
    """The rules ``config`` enables for ``path``, as the manifest has them: a rule's module is
    imported, and the rule made, only once a file gives it nodes to check (``lint_source``)."""
    return [r for r in rule_specs() if config.is_enabled(r.code, r.category.value, path)]


def parse(source: Source) -> ast.Module:
    """``ast.parse`` with every failure turned into a SourceError naming the line."""
    try:
        return ast.parse(source.text, filename=source.path)
    except SyntaxError as exc:
        line = exc.lineno
        msg = exc.msg or "invalid syntax"
        raise SourceError(f"cannot parse: {msg}", line=line, column=exc.offset) from None
    except (RecursionError, MemoryError):
        raise SourceError("cannot parse: expressions nested too deeply for Python's parser") from None
    except ValueError as exc:
        raise SourceError(f"cannot parse: {exc}") from None


def may_import(text: str, package: str) -> bool:
    """Whether a file's text can import ``package``: an import writes the package's name as a word,
    between characters that cannot be part of a name. Python reads names in NFKC form
    (``ｔｏｒｃｈ`` is ``torch``), so a non-ASCII text is searched in that form."""
    if _has_word(text, package):
        return True
    # normalising is a pass over the text: only for what can hide the name
    return not text.isascii() and _has_word(unicodedata.normalize("NFKC", text), package)


def _has_word(text: str, package: str) -> bool:
    # str.find, not a regex: ``\btorch\b`` makes the regex engine try every position of the text
    n = len(package)
    i = text.find(package)
    while i >= 0:
        before, after = text[i - 1:i], text[i + n:i + n + 1]
        if not (before.isalnum() or before == "_" or after.isalnum() or after == "_"):
            return True
        i = text.find(package, i + 1)
    return False


def check_syntax(source: Source) -> None:
    """``parse``'s verdict without keeping a tree of Python objects (with the garbage collector off,
    as lint runs, compiling costs about what ``ast.parse`` does). The compiler also refuses what the
    parser accepts (``return`` outside a function...): then ``parse`` decides, as for any file."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the compiler's own warnings (`is` with a literal...)
            compile(source.text, source.path, "exec", dont_inherit=True)
    except Exception:  # noqa: BLE001 - whatever it is, parse gives the answer every file gets
        parse(source)


def index(ctx: FileContext) -> None:
    """The single walk of the file (``tree_index.index_tree``): parents and a by-type index."""
    ctx.index()


def callee_name(call: ast.Call, aliases: dict[str, str]) -> str | None:
    """The last name of a call's callee: ``step`` for ``opt.step()`` and ``step()``, and the imported
    name for an alias (``load`` for ``from torch import load as tload; tload(f)``), so it is always
    the last part of ``ctx.call_name(call)`` when that is not None."""
    func = call.func
    t = type(func)
    if t is ast.Attribute:
        return func.attr  # type: ignore[attr-defined, no-any-return]
    if t is ast.Name:
        name: str = func.id  # type: ignore[attr-defined]
        origin = aliases.get(name)
        return origin.rpartition(".")[2] if origin else name
    return None


class NameIndex:
    """The file's calls by callee's last name, attributes by ``.attr`` and ``from m import`` statements
    by imported name, each in walk order; built on the first rule that asks (for the pre-filters)."""

    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self._calls: dict[str, list[tuple[int, ast.AST]]] | None = None
        self._attrs: dict[str, list[tuple[int, ast.AST]]] | None = None
        self._imports: dict[str, list[tuple[int, ast.AST]]] | None = None

    @property
    def calls(self) -> dict[str, list[tuple[int, ast.AST]]]:
        if self._calls is None:
            aliases = self.ctx.aliases
            out: dict[str, list[tuple[int, ast.AST]]] = {}
            for i, n in enumerate(self.ctx.by_type.get(ast.Call, ())):  # one loop per file: no generator
                name = callee_name(n, aliases)  # type: ignore[arg-type]
                if name is None:
                    continue  # ``f()()``, ``fns[0]()``: no name a pre-filter can ask for
                bucket = out.get(name)
                if bucket is None:
                    out[name] = [(i, n)]
                else:
                    bucket.append((i, n))
            self._calls = out
        return self._calls

    @property
    def attrs(self) -> dict[str, list[tuple[int, ast.AST]]]:
        if self._attrs is None:
            out: dict[str, list[tuple[int, ast.AST]]] = {}
            for i, n in enumerate(self.ctx.by_type.get(ast.Attribute, ())):
                bucket = out.get(n.attr)  # type: ignore[attr-defined]
                if bucket is None:
                    out[n.attr] = [(i, n)]  # type: ignore[attr-defined]
                else:
                    bucket.append((i, n))
            self._attrs = out
        return self._attrs

    @property
    def imports(self) -> dict[str, list[tuple[int, ast.AST]]]:
        if self._imports is None:
            self._imports = _group((i, n, a.name) for i, n in enumerate(self.ctx.by_type.get(ast.ImportFrom, ()))
                                   for a in n.names)  # type: ignore[attr-defined]
        return self._imports


def _group(items: Iterable[tuple[int, ast.AST, str]]) -> dict[str, list[tuple[int, ast.AST]]]:
    out: dict[str, list[tuple[int, ast.AST]]] = {}
    for i, node, name in items:
        bucket = out.get(name)
        if bucket is None:
            out[name] = [(i, node)]
        elif bucket[-1][0] != i:  # ``from m import a, a``: the statement once
            bucket.append((i, node))
    return out


def _select(index: dict[str, list[tuple[int, ast.AST]]], names: frozenset[str]) -> list[ast.AST]:
    """The nodes filed under any of ``names``, each once, in walk order."""
    if len(names) <= len(index):
        found = [index[n] for n in names if n in index]
    else:
        found = [v for k, v in index.items() if k in names]
    if not found:
        return []
    if len(found) == 1:
        return [n for _, n in found[0]]
    return [n for _, n in sorted({i: n for bucket in found for i, n in bucket}.items())]


def rule_nodes(rule: Rule | RuleSpec, ctx: FileContext, names: NameIndex) -> list[ast.AST]:
    """The nodes the engine hands ``rule``: of its types, through its ``calls``/``attrs``/``imported``
    pre-filters, in walk order for each type."""
    calls, attrs, imported = rule.calls, rule.attrs, rule.imported
    if not calls and not attrs and not imported:
        return ctx.nodes(*rule.nodes)
    out: list[ast.AST] = []
    for t in rule.nodes:
        if t is ast.Call and calls:
            out += _select(names.calls, calls)
        elif t is ast.Attribute and attrs:
            out += _select(names.attrs, attrs)
        elif t is ast.ImportFrom and imported:
            out += _select(names.imports, imported)
        else:
            out += ctx.by_type.get(t, ())
    return out


def _to_finding(rule: Rule, hit: Hit, ctx: FileContext, unsafe: bool = False) -> Finding:
    node, end = hit.node, hit.end_node or hit.node
    line = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    end_line = getattr(end, "end_lineno", None)
    end_col = getattr(end, "end_col_offset", None)
    loc = ctx.locator
    column = end_column = None
    if line is not None and col is not None:
        column = loc.offset(line, col) - loc.starts[line] + 1
    if end_line is not None and end_col is not None:
        end_column = loc.offset(end_line, end_col) - loc.starts[end_line] + 1
    cell = None
    if ctx.source.notebook and line is not None:
        cell, line = ctx.source.locate(line)
        if end_line is not None:
            end_cell, end_line = ctx.source.locate(end_line)
            if end_cell != cell:
                end_line = end_column = None
    # the weaker of what the rule claims (``may`` unless it says) and what the analysis noted
    recorded = ctx.evidence
    level = min(hit.evidence.rank if hit.evidence is not None else MAY, recorded.level)
    evidence = LINT_EVIDENCE[level]
    # ruff's applicability: `--fix` applies safe fixes, `--unsafe-fixes` the others too (Rule.unsafe_fix)
    extra: dict[str, Any] = {"fixable": True, "fix_applicability": "unsafe" if unsafe else "safe"} if hit.edits else {}
    if recorded.level < MUST:
        extra["evidence_reasons"] = recorded.rendered()
    finding = Finding(
        code=rule.code,
        category=rule.category,
        severity=min(hit.severity or rule.severity, severity_cap(evidence)),
        message=hit.message or rule.message,
        path=ctx.path,
        line=line,
        column=column,
        end_line=end_line,
        end_column=end_column,
        subject=hit.subject,
        fix=hit.fix_hint or rule.fix_hint,
        cell=cell,
        evidence=evidence,
        extra=extra,
    )
    return finding


def _suppressed(ctx: FileContext, code: str, node: ast.AST) -> int:
    """The line whose ``# noqa`` silences ``code`` at ``node`` (the node's or its statement's first), or 0."""
    lines = ctx.lines
    candidates = [getattr(node, "lineno", 0)]
    stmt = ctx.statement(node)
    if stmt is not None and stmt.lineno != candidates[0]:
        candidates.append(stmt.lineno)
    return next((n for n in candidates if 0 < n <= len(lines) and is_suppressed(lines[n - 1], code)), 0)


def checks_noqa(config: Config, path: str) -> bool:
    """Whether TP005 (unused ``# noqa``) runs: only when its code is selected by name (ruff's RUF100 is
    not in the default set either), and not ignored."""
    return any(s.strip().upper() == UNUSED_NOQA for s in config.select) and config.is_enabled(
        UNUSED_NOQA, Category.INPUT.value, path)


def _noqa_findings(source: Source, config: Config, rules: Sequence[Rule | RuleSpec], used: set[tuple[int, str]],
                   findings: list[Finding]) -> tuple[list[Finding], list[Edit]]:
    unfinished = {f.extra["rule"] for f in findings if f.code == INTERNAL_CODE and f.extra.get("rule")}
    found, edits = unused(source, used, frozenset(declared_codes()), {r.code for r in rules}, unfinished)
    return [config.apply(f) for f in found], edits


def _internal_finding(ctx: FileContext, node: ast.AST | None, rule: str, stopped: str, message: str) -> Finding:
    """TP002: torchpact's own analysis failed or ran out of time; never the user's input problem. A
    warning: the rule's findings in this file may be incomplete, so the default ``--fail-on warning``
    does not pass the file as clean (``extra`` names the rule and why it stopped, for the summary)."""
    line = getattr(node, "lineno", None)
    cell = None
    if line is not None and ctx.source.notebook:
        cell, line = ctx.source.locate(line)
    return Finding(code=INTERNAL_CODE, category=Category.INPUT, severity=Severity.WARNING, message=message,
                   path=ctx.path, line=line, cell=cell, extra={"rule": rule, "stopped": stopped})


def lint_source(source: Source, config: Config, rules: Sequence[Rule | RuleSpec] | None = None,
                project: ProjectFacts | None = None,
                notes: dict[str, Any] | None = None) -> tuple[list[Finding], list[Edit]]:
    """Findings and fix edits for one source text. ``notes`` (when given) receives the file's
    function ``summary``, the project facts its rules ``asked`` about, how many findings the
    preview gate ``hidden`` (lint/preview.py; their fixes are not applied either), and each reported
    finding's own fix (``fixes``: (finding, edits, unsafe)). ``rules`` are
    rules or the manifest's specs of them (made here, once per file, for the rules that get nodes)."""
    if rules is None:
        rules = enabled_rules(config, source.path)
    text = source.text
    found: dict[str, bool] = {}  # each trigger searched once per file, however many rules share it

    def triggered(rule: Rule | RuleSpec) -> bool:
        for t in rule.triggers:
            hit = found.get(t)
            if hit is None:
                hit = found[t] = t in text
            if hit:
                return True
        return not rule.triggers

    imported: dict[str, bool] = {}
    candidates = []
    for r in rules:
        package = "torch" if r.needs_torch_import else r.needs_import
        if package is not None:
            can = imported.get(package)
            if can is None:
                can = imported[package] = may_import(text, package)
            if not can:
                continue  # before any trigger: most rules need torch, and many files never import it
        candidates.append(r)
    summarize = notes is not None and mentions_facts(text)
    noqa = checks_noqa(config, source.path)
    if not summarize and not any(triggered(r) for r in candidates):
        check_syntax(source)  # even with no rule to run: a file lint cannot parse is always reported
        return _noqa_findings(source, config, rules, set(), []) if noqa else ([], [])
    tree = parse(source)
    ctx = FileContext(source, tree, config, project)
    index(ctx)
    if summarize:
        notes["summary"] = summarize_tree(tree, ctx.by_type, ctx.navigation.parents).to_json()  # type: ignore[index]
    findings: list[Finding] = []
    edits: list[Edit] = []
    names = NameIndex(ctx)
    gate = Gate(config.preview, config.select)
    hidden = 0
    budget = rule_budget()
    used: set[tuple[int, str]] = set()  # (line, code) of each noqa comment that silenced a finding
    fixes: list[tuple[Finding, tuple[Edit, ...], bool]] = []
    for rule in candidates:
        if (rule.needs_torch_import and not ctx.imports_torch) or (
                rule.needs_import is not None and not ctx.imports(rule.needs_import)):
            continue
        # the nodes first: a trigger missing from the text is a search through all of it
        nodes = rule_nodes(rule, ctx, names)
        if not nodes or not triggered(rule):
            continue
        if isinstance(rule, RuleSpec):
            rule = rule()
        unsafe = rule.unsafe_fix
        ctx.start_budget(budget)
        node: ast.AST | None = None
        recorded = ctx.evidence
        try:
            for i, node in enumerate(nodes):
                if recorded.level < MUST:
                    recorded.reset()
                for hit in rule.check(node, ctx):
                    silenced = _suppressed(ctx, rule.code, hit.node)
                    if silenced:
                        used.add((silenced, rule.code))
                        continue
                    finding = _to_finding(rule, hit, ctx, unsafe)
                    if gate.hides(finding):  # before the configured severity: the measure is of torchpact's own
                        hidden += 1
                        continue
                    finding = config.apply(finding)
                    findings.append(finding)
                    if hit.edits:
                        fixes.append((finding, tuple(hit.edits), unsafe))
                        if config.unsafe_fixes or not unsafe:
                            edits.extend(hit.edits)
                if not i & 127 and ctx.out_of_time():
                    raise BudgetExceeded
        except BudgetExceeded:
            findings.append(_internal_finding(
                ctx, node, rule.code, STOPPED_BUDGET,
                f"rule {rule.code} ran out of its {budget:g} s CPU budget on this file and stopped here: "
                f"its findings in this file may be incomplete ({BUDGET_ENV}=SECONDS gives it more)"))
        except Exception as exc:  # a bug in a rule (RecursionError included) must not cost the other findings
            findings.append(_internal_finding(
                ctx, node, rule.code, STOPPED_ERROR,
                f"rule {rule.code} failed on this file ({exc.__class__.__name__}: {str(exc)[:200]}); "
                "other rules still ran — please report this"))
        finally:
            ctx.budget.deadline = None
    if noqa:
        more, noqa_edits = _noqa_findings(source, config, rules, used, findings)
        findings += more
        edits += noqa_edits
    if notes is not None:
        notes["asked"] = sorted(ctx.asked)
        notes["hidden"] = hidden
        notes["fixes"] = fixes
    return findings, edits


def _input_finding(path: str, exc: SourceError) -> Finding:
    f = input_finding(path, str(exc), line=exc.line, column=exc.column)
    return f.replace(cell=exc.cell) if exc.cell is not None else f


def lint_file(path: str, config: Config, fix: bool = False, display_path: str | None = None,
              project: ProjectFacts | None = None, data: bytes | None = None,
              selection: RuleSelection | None = None) -> FileResult:
    """Lint one file (with ``data``, those bytes as its content: standard input); never raises for bad
    input (it becomes a finding). A run over many files passes its ``selection`` of rules."""
    shown = display_path or path
    result = FileResult(path=shown)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # ASTs hold no cycles (see lint/analysis/navigation.py); GC passes only cost time here
    try:
        try:
            source = read_source(path) if data is None else source_from_bytes(path, data)
        except SourceError as exc:
            result.findings.append(_input_finding(shown, exc))
            return result
        source.path = shown
        result.original = source.file_text
        result.lines = source.text.count("\n") + 1
        rules = selection.enabled(config, shown) if selection is not None else enabled_rules(config, shown)
        bad_cells = [_input_finding(shown, exc) for exc in source.errors]
        for attempt in range(MAX_FIX_PASSES if fix else 1):
            notes: dict[str, Any] = {}
            try:
                findings, edits = lint_source(source, config, rules, project, notes)
            except SourceError as exc:
                cell, line = source.locate(exc.line) if exc.line else (None, None)
                exc.cell, exc.line = cell, line
                result.findings = [_input_finding(shown, exc)]
                return result
            result.findings = bad_cells + findings
            result.hidden = notes.get("hidden", 0)
            if attempt == 0:
                result.summary, result.asked = notes.get("summary", {}), notes.get("asked", [])
                result.fixes = notes.get("fixes", [])
            if not (fix and edits):
                break
            fixed, applied = source.apply(edits)
            if fixed.text == source.text:
                break
            result.fixes_applied += applied
            fixed.path = shown
            source = fixed
        if source.file_text != result.original:
            result.fixed = source.file_text
        return result
    finally:
        if gc_was_enabled:
            gc.enable()
