"""Overhead of `torchpact run` on a blind set: real training scripts of other projects, run unmodified.

Chosen and first measured before any change made for them (the first table in bench/README.md stays as
it was measured). Their code never enters this repository: each run of the bench brings every project
at a pinned commit (or a pinned PyPI version) into a temporary folder and runs it there with synthetic
data and a small configuration, given from outside only: command-line arguments, data files written
in the script's working directory, environment variables, and two stand-ins on the child's PYTHONPATH
(``gym``: gymnasium under its old name that ends the run after a number of episodes, for scripts whose
episode loop has no bound of its own; matplotlib's Agg backend so that ``plt.show()`` returns).

Where the projects come from, first match wins:
- git repositories: ``$TP_BLIND_REPOS`` (folders, ``os.pathsep``-separated) holding each as a git
  directory named ``owner+name/repo``, ``owner+name``, ``owner/name`` or ``name`` (bare or not); else a
  shallow fetch of the pinned commit from GitHub (``git`` on PATH, network).
- PyPI packages (stable-baselines3 and what it imports): ``pip install --no-deps --target`` of pinned
  versions into ``$TP_BLIND_CACHE`` (default ``~/.cache/torchpact-bench-blind``), once.
A workload whose project cannot be had is skipped with a one-line reason; the bench fails only on a
workload that ran and missed its target.

Measured as bench/run_overhead.py does (its ``measure``): the CPU time of the whole process tree, one
thread, plain python against ``torchpact run`` side by side, median of paired ratios. Target <= 1.05x.

    .venv/bin/python bench/run_overhead_blind.py [--repeat 5] [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_overhead import PY, TORCHPACT, Run, measure, median_interval  # noqa: E402

TARGET = 1.05

# Pinned sources: (GitHub owner/name, commit)
MINGPT = ("karpathy/minGPT", "37baab71b9abea1b76ab957409a1cc2fbfba8a26")
NANOGPT = ("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291")
MAKEMORE = ("karpathy/makemore", "988aa59e4d8fefa526d06f3b453ad116258398d4")
NLP_TUTORIAL = ("graykode/nlp-tutorial", "d05e31ec81d56d70c1db89b99ab07e948f7ebc11")
MINIMALRL = ("seungeunrho/minimalRL", "c8efed8481e3cd40e9739cfde220a55522555b57")

# Pinned PyPI packages, installed without dependency resolution (torch and numpy are the venv's own).
PIP = ("stable-baselines3==2.7.0", "gymnasium==1.2.0", "cloudpickle==3.1.3", "farama-notifications==0.0.6",
       "pandas==2.3.3", "python-dateutil==4.0.0", "six==1.17.0", "pytz==2026.6", "tzdata==2026.6",
       "matplotlib==3.10.7", "pyparsing==3.3.3", "cycler==0.12.1", "kiwisolver==1.5.1", "fonttools==4.68.0",
       "contourpy==1.3.3", "pillow==13.0.0", "tensorboard==2.20.0", "protobuf==7.36.2", "absl-py==2.5.1",
       "tensorboard-data-server==0.7.2", "markdown==3.11.3", "werkzeug==3.1.9", "grpcio==1.85.3")


def _text(path: Path, size: int, alphabet: str, seed: int = 0) -> None:
    """A deterministic text of ``size`` characters drawn from ``alphabet`` (words and lines)."""
    rng = random.Random(seed)
    out, n = [], 0
    while n < size:
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        sep = "\n" if rng.random() < 0.1 else " "
        out.append(word + sep)
        n += len(word) + 1
    path.write_text("".join(out))


CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,.!?;:'-"


def prep_chargpt(work: Path) -> None:
    _text(work / "input.txt", 200_000, CHARS)


def prep_nanogpt(work: Path) -> None:
    import pickle

    import numpy as np

    data = work / "data" / "synth"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 200_000), ("val", 20_000)):
        rng.integers(0, 65, n, dtype=np.uint16).tofile(data / f"{split}.bin")
    with open(data / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 65}, f)


def prep_makemore(work: Path) -> None:
    rng = random.Random(0)
    names = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 12)))
             for _ in range(8000)]
    (work / "names.txt").write_text("\n".join(names) + "\n")


SB3_DRIVER = """\
# the README example of stable-baselines3 (training part; no rendering), a fixed seed
import sys
from stable_baselines3 import {algo}
model = {algo}("MlpPolicy", "CartPole-v1", seed=0, verbose=0)
model.learn(total_timesteps=int(sys.argv[1]))
"""


def prep_sb3(algo: str) -> Callable[[Path], None]:
    def prep(work: Path) -> None:
        (work / f"sb3_{algo.lower()}.py").write_text(SB3_DRIVER.format(algo=algo))
    return prep


GYM_STANDIN = '''\
"""gym's old name for gymnasium (the API of gym >= 0.26 that these scripts use). The run ends with exit
status 0 at the reset that would start episode TP_BLIND_EPISODES + 1: for episode loops with no bound
that an argument could set. Seeds python's, numpy's and torch's generators and the first reset, so that
every run makes the same episodes (the scripts seed nothing: episode lengths would vary run to run)."""
import os
import random
import sys

import gymnasium
import numpy
import torch
from gymnasium import *  # noqa: F401,F403

random.seed(0)
numpy.random.seed(0)
torch.manual_seed(0)

_LIMIT = int(os.environ.get("TP_BLIND_EPISODES", "0"))


class _Capped(gymnasium.Wrapper):
    episodes = 0

    def reset(self, **kwargs):
        _Capped.episodes += 1
        if _LIMIT and _Capped.episodes > _LIMIT:
            sys.exit(0)
        if _Capped.episodes == 1:
            kwargs.setdefault("seed", 0)
        return self.env.reset(**kwargs)


def make(*args, **kwargs):
    return _Capped(gymnasium.make(*args, **kwargs))
'''


@dataclass(frozen=True)
class Workload:
    name: str
    what: str                       # one line for the table's legend
    script: str                     # path inside the project (or the driver written by prepare)
    args: tuple[str, ...] = ()
    repo: tuple[str, str] | None = None
    pip: bool = False               # needs the pinned PyPI packages
    prepare: Callable[[Path], None] | None = None  # writes data (or a driver) into the working directory
    env: dict[str, str] = field(default_factory=dict)
    repo_on_path: bool = False      # the project's root goes on PYTHONPATH (a package beside the script)
    cwd_is_repo: bool = False       # run in the project's root (scripts that read files relative to it)


WORKLOADS = (
    Workload("mingpt_chargpt", "minGPT projects/chargpt/chargpt.py: gpt-micro, batch 16, 20 iterations, 2 "
             "DataLoader workers, 500 tokens generated under no_grad at iteration 0",
             "projects/chargpt/chargpt.py", ("--model.model_type=gpt-micro", "--trainer.batch_size=16",
                                             "--trainer.max_iters=20", "--trainer.num_workers=2",
                                             "--system.work_dir=out"),
             repo=MINGPT, prepare=prep_chargpt, repo_on_path=True),
    Workload("nanogpt", "nanoGPT train.py: 2 layers, d 128, 40 iterations of 2 micro-batches, eval every 20 "
             "(5 batches a split under no_grad), float32, no compile",
             "train.py", ("--dataset=synth", "--device=cpu", "--compile=False", "--dtype=float32", "--n_layer=2",
                          "--n_head=4", "--n_embd=128", "--block_size=64", "--batch_size=8", "--max_iters=40",
                          "--lr_decay_iters=40", "--warmup_iters=5", "--eval_interval=20", "--eval_iters=5",
                          "--log_interval=10", "--gradient_accumulation_steps=2", "--out_dir=out",
                          "--always_save_checkpoint=False"),
             repo=NANOGPT, prepare=prep_nanogpt, cwd_is_repo=True),
    Workload("makemore", "makemore.py: transformer, 201 steps, 2 DataLoader workers, 10 names sampled at step "
             "200, a tensorboard SummaryWriter",
             "makemore.py", ("-i", "names.txt", "-o", "out", "--max-steps", "201", "--num-workers", "2"),
             repo=MAKEMORE, pip=True, prepare=prep_makemore),
    Workload("sb3_ppo", "stable-baselines3 2.7.0 PPO on CartPole (README example): 2048 rollout steps with "
             "predictions under no_grad, 10 epochs of 32 minibatches", "sb3_ppo.py", ("640",),
             pip=True, prepare=prep_sb3("PPO")),
    Workload("sb3_dqn", "stable-baselines3 2.7.0 DQN on CartPole (README example): 3000 steps, one "
             "prediction each, a gradient step every 4 after 100", "sb3_dqn.py", ("3000",),
             pip=True, prepare=prep_sb3("DQN")),
    Workload("minimalrl_ppo", "minimalRL ppo.py on CartPole: 60 episodes, rollouts with grad, 3 epochs every "
             "20 steps", "ppo.py", repo=MINIMALRL, pip=True, env={"TP_BLIND_EPISODES": "60"}),
    Workload("minimalrl_dqn", "minimalRL dqn.py on CartPole: 200 episodes, replay training after 2000 steps",
             "dqn.py", repo=MINIMALRL, pip=True, env={"TP_BLIND_EPISODES": "200"}),
    Workload("nlp_transformer", "nlp-tutorial 5-1.Transformer/Transformer.py: 20 epochs, greedy decoding, "
             "attention plots (Agg)", "5-1.Transformer/Transformer.py", repo=NLP_TUTORIAL, pip=True),
    Workload("nlp_textlstm", "nlp-tutorial 3-2.TextLSTM/TextLSTM.py: 1000 epochs of a character LSTM",
             "3-2.TextLSTM/TextLSTM.py", repo=NLP_TUTORIAL),
    Workload("nlp_seq2seq_attn", "nlp-tutorial 4-2.Seq2Seq(Attention): 2000 epochs, an RNN cell and attention "
             "per time step", "4-2.Seq2Seq(Attention)/Seq2Seq(Attention).py", repo=NLP_TUTORIAL, pip=True),
)


def _git_dir(repo: str) -> Path | None:
    owner, name = repo.split("/")
    for root in filter(None, os.environ.get("TP_BLIND_REPOS", "").split(os.pathsep)):
        base = Path(root).expanduser()
        for cand in (base / f"{owner}+{name}" / "repo", base / f"{owner}+{name}", base / owner / name, base / name):
            if (cand / "HEAD").is_file() or (cand / ".git").exists():
                return cand
    return None


def bring_repo(repo: tuple[str, str], dest: Path) -> str | None:
    """The project's tree at the pinned commit into ``dest``; a reason when it cannot be had."""
    name, commit = repo
    git = shutil.which("git")
    if git is None:
        return "git is not on PATH"
    dest.mkdir(parents=True)
    local = _git_dir(name)
    if local is None:
        local = dest.parent / (dest.name + ".git")
        fetched = subprocess.run(
            f"{git} init -q --bare {local} && {git} --git-dir {local} fetch -q --depth 1 "
            f"https://github.com/{name} {commit}", shell=True, capture_output=True, text=True, timeout=300)
        if fetched.returncode:
            reason = (fetched.stderr.strip().splitlines() or ['?'])[-1]
            return f"{name}: not in $TP_BLIND_REPOS and not fetched ({reason})"
    archive = subprocess.run(f"{git} --git-dir {local} archive {commit} | tar -x -C {dest}", shell=True,
                             capture_output=True, text=True)
    if archive.returncode:
        return f"{name}: commit {commit[:12]} not in {local}"
    return None


def bring_pip() -> tuple[Path | None, str | None]:
    """The pinned PyPI packages, installed once into the cache; (folder, None) or (None, reason)."""
    key = hashlib.sha256("\n".join(PIP).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("TP_BLIND_CACHE", "~/.cache/torchpact-bench-blind")).expanduser()
    target = cache / f"pip-{key}"
    if target.is_dir():
        return target, None
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache))
    out = subprocess.run([PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                          "--target", str(tmp), *PIP], capture_output=True, text=True, timeout=900)
    if out.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        return None, "pinned PyPI packages not installed (" + (out.stderr.strip().splitlines() or ["?"])[-1] + ")"
    tmp.rename(target)
    return target, None


@dataclass
class Ready:
    workload: Workload
    cmd: list[str]
    cwd: str
    env: dict[str, str]


def make_ready(w: Workload, root: Path, pip_dir: Path | None, shims: Path) -> Ready | str:
    """Brings and prepares one workload under ``root``; a reason string when it is skipped."""
    work = root / w.name
    tree = work / "src"
    if w.repo is not None:
        reason = bring_repo(w.repo, tree)
        if reason:
            return reason
    else:
        tree.mkdir(parents=True)
    cwd = tree if w.cwd_is_repo else work
    if w.prepare is not None:
        w.prepare(cwd)
    path = [str(shims)]
    if w.pip:
        if pip_dir is None:
            return "needs the pinned PyPI packages"
        path.append(str(pip_dir))
    if w.repo_on_path:
        path.append(str(tree))
    script = tree / w.script if w.repo is not None else cwd / w.script
    env = {"PYTHONPATH": os.pathsep.join(path), "MPLBACKEND": "Agg", **w.env}
    return Ready(w, [str(script), *w.args], str(cwd), env)


def measure_each(cmds: list[tuple[list[str], dict[str, str]]], cwd: str) -> list[Run]:
    """``measure`` of commands that differ in their environment too: started together, one thread each."""
    import threading

    out: list[list[Run]] = [[] for _ in cmds]
    barrier = threading.Barrier(len(cmds))

    def one(i: int) -> None:
        barrier.wait()
        out[i] = measure([cmds[i][0]], cmds[i][1], cwd)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cmds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(not o for o in out):
        sys.exit("a run failed")
    return [o[0] for o in out]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="pairs of runs per workload (median)")
    ap.add_argument("--only", nargs="*", choices=[w.name for w in WORKLOADS], help="a subset of the workloads")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("--baseline", metavar="SRC",
                    help="also run torchpact from this source folder (a checkout's src/ of another commit) in "
                         "each set, side by side with the others: its ratios are shown beside this one's")
    ap.add_argument("--no-warmup", action="store_true", help="skip the unmeasured first run of each workload")
    args = ap.parse_args()
    chosen = [w for w in WORKLOADS if not args.only or w.name in args.only]
    if args.list:
        for w in chosen:
            print(f"{w.name:<18} {w.what}")
        return 0
    side_by_side = len(os.sched_getaffinity(0)) >= 2
    with tempfile.TemporaryDirectory(prefix="tp-blind-") as tmp:
        root = Path(tmp)
        shims = root / "shims"
        shims.mkdir()
        (shims / "gym.py").write_text(GYM_STANDIN)
        pip_dir, pip_reason = (None, None)
        if any(w.pip for w in chosen):
            pip_dir, pip_reason = bring_pip()
        ready: list[Ready] = []
        for w in chosen:
            got = make_ready(w, root, pip_dir, shims)
            if isinstance(got, str):
                print(f"skip {w.name}: {pip_reason if got.startswith('needs the pinned') and pip_reason else got}")
                continue
            ready.append(got)
        # one unmeasured run each: bytecode written, caches warm, the run known to work
        for r in [] if args.no_warmup else ready:
            warm = measure([[PY, *r.cmd]], r.env, r.cwd)[0]
            print(f"  {r.workload.name} warm-up: {warm.cpu:.2f} CPU-s", file=sys.stderr, flush=True)
        runs: dict[tuple[str, str], list[Run]] = {}
        for k in range(args.repeat):
            for r in ready:
                variants = [("plain", [PY, *r.cmd], r.env), ("torchpact", [*TORCHPACT, *r.cmd], r.env)]
                if args.baseline:
                    base_env = dict(r.env, PYTHONPATH=os.pathsep.join([args.baseline, r.env["PYTHONPATH"]]))
                    variants.append(("baseline", [*TORCHPACT, *r.cmd], base_env))
                variants = variants[k % len(variants):] + variants[:k % len(variants)]  # who starts first turns
                if side_by_side:
                    measured = measure_each([(cmd, env) for _, cmd, env in variants], r.cwd)
                else:
                    measured = [measure_each([(cmd, env)], r.cwd)[0] for _, cmd, env in variants]
                for (variant, _, _), run in zip(variants, measured, strict=True):
                    runs.setdefault((r.workload.name, variant), []).append(run)
                    print(f"  {r.workload.name} {variant}: {run.cpu:.2f} CPU-s, {run.wall:.2f} s, {run.full} full "
                          f"collections", file=sys.stderr, flush=True)
    if not ready:
        print("no workload could be had: nothing measured")
        return 0
    how = "side by side, one per core" if side_by_side else "one after the other"
    print(f"blind set: median of {args.repeat} pairs of runs ({how}); CPU = process tree, user + system; "
          f"paired = median of the ratios within pairs; target <= {TARGET:.2f}x")
    print(f"{'workload':<18} {'plain cpu':>9} {'tp cpu':>8} {'paired':>7} {'interval':>13} {'gc plain/tp':>11}"
          + (f" {'baseline':>9}" if args.baseline else ""))
    ok = True
    for r in ready:
        name = r.workload.name
        plain, tp = runs[(name, "plain")], runs[(name, "torchpact")]
        base = runs.get((name, "baseline"), [])  # (only with --baseline)
        ratios = [t.cpu / p.cpu for p, t in zip(plain, tp, strict=True)]
        paired = statistics.median(ratios)
        lo, hi = median_interval(ratios)
        ok &= paired <= TARGET
        gcs = f"{statistics.median(x.full for x in plain):g}/{statistics.median(x.full for x in tp):g}"
        print(f"{name:<18} {statistics.median(x.cpu for x in plain):9.2f} {statistics.median(x.cpu for x in tp):8.2f} "
              f"{paired:6.3f}x {lo:6.3f}-{hi:.3f}x {gcs:>11}"
              + (f" {statistics.median(b.cpu / p.cpu for p, b in zip(plain, base, strict=True)):8.3f}x"
                 if args.baseline else ""))
    print("PASS" if ok else "FAIL (CPU ratio above target)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
