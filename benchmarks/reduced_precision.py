"""Can the parity gate tell a correct FP16 / BF16 export from a broken one? The seeded weights before and after
their conditioning (``registry.keras_models.CONDITIONING``), and the gate relative to the model's own error in
each precision (``inferbench.measure.parity.relative_gate``), measured on the torchvision twins.

For each model, at one resolution: (1) in a TensorFlow child, the Keras model is built with the seeded weights as
inferbench builds them, and as it built them before the conditioning (no smooth part in depthwise kernels, batch-norm
offsets centred on 0); its 16 reference inputs, FP32 reference outputs and own FP16/BF16 error are computed as the
``keras`` export computes them. (2) In a torch child, each twin runs in FP64, FP16 and BF16 on those inputs: the
relative L2 error of each stage's output against FP64 (block by block), the final outputs' largest per-image max error
(relative to the image's own max |logit|), smallest cosine and top-1 agreement against FP64, and the verdict of the
gate against the Keras FP32 reference (as a cell's parity check gives it). (3) For the conditioned weights, one layer
at a time (12 spread over the network) has its weights perturbed by 1% (each weight times 1 + 0.01 z) and is run in
FP16: is it caught?

    python benchmarks/reduced_precision.py [--models mobilenet_v3_large,mobilenet_v3_small,resnet50,efficientnet_b0]
        [--resolution 224] [--out DIR]

Writes DIR/results.json, DIR/table.md and DIR/error_by_block.png. No timing: nothing here depends on the machine's
load, only on its arithmetic (the CPU is recorded).

Looks inside: the FP16/BF16 parity gate and the seeded weights' conditioning; the Python API (inferbench.api) has no
such piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SAMPLE = "mobilenet_v3_large,mobilenet_v3_small,resnet50,efficientnet_b0"
VARIANTS = ("before", "conditioned")


def keras_stage(models: list[str], resolution: int, work: Path, count: int) -> None:
    """TensorFlow child: each model's weights (both variants), reference inputs and outputs, own error; for the
    conditioned weights the FP32 outputs on ``count`` agreement inputs and the model's own agreement with them."""
    from inferbench.exporters.agreement import own_agreement
    from inferbench.exporters.reference import (
        in_each_reduced_precision,
        keras_call,
        parity_inputs,
        precision_sensitivity,
    )
    from inferbench.registry import keras_models as registry
    from inferbench.registry.inputs import agreement_inputs
    from inferbench.registry.models import get_model
    from inferbench.registry.ports import keras_weights

    conditioned = registry.smooth_kernels, registry.BN_OFFSET
    for name in models:
        spec = get_model(name)
        inputs = parity_inputs(spec, resolution, 0)
        for variant in VARIANTS:
            if variant == "before":  # as the seeded weights were made before the conditioning
                registry.smooth_kernels, registry.BN_OFFSET = (lambda layers: None), 0.0
            try:
                model = registry.build_keras_model(spec, resolution, "random", 0)
            finally:
                registry.smooth_kernels, registry.BN_OFFSET = conditioned
            reference = np.asarray(keras_call(model)(inputs), dtype=np.float32)
            np.savez(work / f"{name}-{variant}.npz", **keras_weights(model))
            np.save(work / f"{name}-{variant}-reference.npy", reference)
            own = precision_sensitivity(in_each_reduced_precision(model), inputs, reference,
                                        registry.images_per_call(resolution, 16))
            (work / f"{name}-{variant}-own.json").write_text(json.dumps(own))
            if variant == "conditioned" and count:  # as the agreement export makes them
                call = keras_call(model)
                many = lambda spec=spec: agreement_inputs(spec, resolution, 0, count)  # noqa: E731
                fp32 = np.concatenate([np.asarray(call(x), dtype=np.float32) for x in many()])
                np.save(work / f"{name}-agreement-reference.npy", fp32)
                (work / f"{name}-agreement-own.json").write_text(json.dumps(own_agreement(model, many, fp32)))
        np.save(work / f"{name}-inputs.npy", inputs)


def run_twin(twin, x, dtype):
    """A copy of ``twin`` in ``dtype`` on ``x``: its outputs and each stage's (in float64)."""
    import copy

    import torch

    from inferbench.runners.torch_stages import stages  # a MobileNet's blocks, a ResNet's layers, the head

    twin = copy.deepcopy(twin).to(dtype)
    outputs = {}
    for k, m in stages(twin):
        m.register_forward_hook(lambda _m, _i, o, k=k: outputs.__setitem__(k, o.detach().double().clone()))
    with torch.no_grad():
        return twin(x.to(dtype)).double().numpy(), outputs


def twin_outputs(twin, chunks, dtype) -> np.ndarray:
    """A copy of ``twin`` in ``dtype`` on each NHWC batch of ``chunks``: its outputs, as float32 rows."""
    import copy

    import torch

    twin = copy.deepcopy(twin).to(dtype)
    with torch.no_grad():
        return np.concatenate([twin(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).to(dtype)).float().numpy()
                               for x in chunks])


def agreement_row(reference: np.ndarray, outputs: np.ndarray, precision: str, own: dict) -> dict:
    """The agreement gate's verdict (``parity.agreement``) in short: top-1 and top-5 agreement, intervals, allowed."""
    from inferbench.measure import parity

    got = parity.agreement(reference, outputs, precision, own)
    return {"status": got["status"], **{k: {"agreement": got[k]["agreement"], "ci95": got[k]["ci95"],
                                            "own": got[k]["own"], "allowed": got[k]["allowed_disagreement"]}
                                        for k in parity.AGREEMENT_KINDS}}


def torch_stage(models: list[str], work: Path, resolution: int, count: int) -> dict:
    """torch child: errors block by block, the gate's verdicts, the perturbations; agreement over ``count`` inputs
    (every model's twins in FP16 and BF16; the first model's perturbations)."""
    import torch

    from inferbench.measure import parity
    from inferbench.registry.inputs import agreement_inputs
    from inferbench.registry.models import get_model
    from inferbench.registry.ports import build_torchvision

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    results: dict = {}
    for name in models:
        x = torch.from_numpy(np.load(work / f"{name}-inputs.npy").transpose(0, 3, 1, 2).copy())
        results[name] = {}
        for variant in VARIANTS:
            weights = dict(np.load(work / f"{name}-{variant}.npz"))
            keras_ref = np.load(work / f"{name}-{variant}-reference.npy")
            own = json.loads((work / f"{name}-{variant}-own.json").read_text())
            twin = build_torchvision(name, weights).eval()
            y64, s64 = run_twin(twin, x, torch.float64)
            row = {"own": own}
            counting = variant == "conditioned" and count
            if counting:
                many = lambda name=name: agreement_inputs(get_model(name), resolution, 0, count)  # noqa: E731
                fp32_many = np.load(work / f"{name}-agreement-reference.npy")
                own_many = json.loads((work / f"{name}-agreement-own.json").read_text())
                row["agreement"] = {p: agreement_row(fp32_many, twin_outputs(twin, many(), dt), p, own_many)
                                    for p, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16))}
            for precision, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
                y, s = run_twin(twin, x, dtype)
                gate = parity.compare(keras_ref, y, precision, sensitivity=own)
                row[precision] = {
                    "blocks": {k: float(np.linalg.norm(s[k] - s64[k]) / np.linalg.norm(s64[k])) for k in s64},
                    "max_rel_err_per_image": parity.per_image_rel_err(y64, y), "cosine": parity.min_cosine(y64, y),
                    "top1": float((y.argmax(1) == y64.argmax(1)).mean()),
                    "gate": {k: gate.get(k) for k in ("status", "reason", "max_rel_err_per_image", "cosine")} | {
                        "per_image_max_rel_err": gate["thresholds"].get("per_image_max_rel_err") or
                        gate["thresholds"]["max_rel_err"], "min_cosine": gate["thresholds"]["min_cosine"]}}
            if variant == "conditioned":
                kernels = [k for k in weights if k.endswith("/kernel") and weights[k].ndim >= 2]
                rng = np.random.default_rng(0)
                picked = [kernels[round(i)] for i in np.linspace(0, len(kernels) - 1, 12)]
                row["perturbed_fp16"] = {}
                for k in picked:
                    w = dict(weights)
                    w[k] = (weights[k] * (1 + 0.01 * rng.standard_normal(weights[k].shape))).astype(np.float32)
                    perturbed = build_torchvision(name, w).eval()
                    y, _ = run_twin(perturbed, x, torch.float16)
                    gate = parity.compare(keras_ref, y, "fp16", sensitivity=own)
                    row["perturbed_fp16"][k.split("/")[0]] = {"status": gate["status"],
                                                              "max_rel_err_per_image": gate["max_rel_err_per_image"]}
                    if counting and name == models[0]:
                        row["perturbed_fp16"][k.split("/")[0]]["agreement"] = agreement_row(
                            fp32_many, twin_outputs(perturbed, many(), torch.float16), "fp16", own_many)
            results[name][variant] = row
    return results


def table(results: dict) -> str:
    lines = ["| model | weights | precision | own error (Keras) | torch twin vs FP64: max err per image, min cosine, "
             "top-1 | gate (per image, cosine) | verdict |", "|---|---|---|---|---|---|---|"]
    for name, variants in results.items():
        for variant, row in variants.items():
            for p in ("fp16", "bf16"):
                r, own = row[p], row["own"].get(p, {})
                g = r["gate"]
                own_txt = f"{own['max_rel_err']:.3g}, {own['cosine']:.4f}" if "max_rel_err" in own else own.get("error")
                lines.append(f"| {name} | {variant} | {p} | {own_txt} | {r['max_rel_err_per_image']:.3g}, "
                             f"{r['cosine']:.4f}, {r['top1'] * 16:.0f}/16 | {g['per_image_max_rel_err']:.3g}, "
                             f"{g['min_cosine']:.4f} | {g['status']} |")
    lines += ["", "One layer's weights 1% off, FP16, conditioned weights (per-image max error; F: failed):", ""]
    for name, variants in results.items():
        pert = variants["conditioned"]["perturbed_fp16"]
        caught = sum(v["status"] == "failed" for v in pert.values())
        lines.append(f"- {name}: caught {caught} of {len(pert)}: " + ", ".join(
            f"{k} {v['max_rel_err_per_image']:.3g}{' F' if v['status'] == 'failed' else ''}" for k, v in pert.items()))
    counted = {name: v["conditioned"]["agreement"] for name, v in results.items() if "agreement" in v["conditioned"]}
    if counted:
        lines += ["", "Agreement with FP32 over the agreement inputs, conditioned weights: the torch twin's top-1 and "
                  "top-5 agreement [95% Wilson interval], the model's own (Keras), the disagreement allowed, verdict:",
                  "", "| model | precision | top-1 [interval] | own top-1 | allowed | top-5 [interval] | own top-5 | "
                  "allowed | verdict |", "|---|---|---|---|---|---|---|---|---|"]
        for name, rows in counted.items():
            for p, r in rows.items():
                cells = [f"{r[k]['agreement']:.3f} [{r[k]['ci95'][0]:.3f}-{r[k]['ci95'][1]:.3f}] | "
                         f"{_fmt(r[k]['own'])} | {r[k]['allowed']:.3g}" for k in ("top1", "top5")]
                lines.append(f"| {name} | {p} | {cells[0]} | {cells[1]} | {r['status']} |")
    for name, variants in results.items():
        pert = {k: v for k, v in variants["conditioned"]["perturbed_fp16"].items() if "agreement" in v}
        if pert:
            either = sum(v["status"] == "failed" or v["agreement"]["status"] == "failed" for v in pert.values())
            lines += ["", f"{name}, one layer's weights 1% off, FP16: top-1 agreement over the agreement inputs "
                      f"(A: its gate failed; F: the 16-input gate failed); caught by either: {either} of {len(pert)}:",
                      "", "- " + ", ".join(f"{k} {v['agreement']['top1']['agreement']:.3f}"
                                           f"{' A' if v['agreement']['status'] == 'failed' else ''}"
                                           f"{' F' if v['status'] == 'failed' else ''}" for k, v in pert.items())]
    return "\n".join(lines) + "\n"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def figure(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), sharey=True, squeeze=False)
    for ax, (name, variants) in zip(axes[0], results.items()):
        for variant, style in zip(VARIANTS, ("--", "-")):
            for p, color in (("fp16", "tab:blue"), ("bf16", "tab:orange")):
                blocks = variants[variant][p]["blocks"]
                ax.plot(range(len(blocks)), list(blocks.values()), style, color=color, marker=".",
                        label=f"{p.upper()}, {'seeded before' if variant == 'before' else 'conditioned'}")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("stage (block) of the network")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("relative L2 error vs FP64")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Reduced-precision error through depth, torchvision twins of the seeded Keras models", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=SAMPLE)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--agreement-inputs", type=int, default=1000, help="seeded inputs the agreement is counted over")
    ap.add_argument("--out", type=Path, default=Path("reduced-precision"))
    ap.add_argument("--stage", choices=("keras", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if args.stage == "keras":
        keras_stage(models, args.resolution, args.work, args.agreement_inputs)
        return 0
    if args.stage == "torch":
        (args.work / "results.json").write_text(json.dumps(torch_stage(models, args.work, args.resolution,
                                                                       args.agreement_inputs)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for stage in ("keras", "torch"):  # TensorFlow and torch never share a process
            print(f"{stage} stage ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, __file__, "--stage", stage, "--work", str(work), "--models", args.models,
                            "--resolution", str(args.resolution), "--agreement-inputs", str(args.agreement_inputs)],
                           check=True)
        results = json.loads((work / "results.json").read_text())
    from inferbench.base.machine import cpu_flag_set

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    meta = {"cpu": cpu, "flags": sorted(f for f in cpu_flag_set() if f.startswith(("avx512", "amx"))),
            "resolution": args.resolution, "models": models, "agreement_inputs": args.agreement_inputs}
    (args.out / "results.json").write_text(json.dumps({"machine": meta, "results": results}, indent=1))
    (args.out / "table.md").write_text(table(results))
    figure(results, args.out / "error_by_block.png")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
