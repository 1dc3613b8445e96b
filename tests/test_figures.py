"""Figures a reader can read: bounded in size, every plotted framework in the legend, log axes with ticks, unstable
and invalid cells marked, quick looks never pooled with measurements, cross-device rows at one batch size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_results import make_record

from inferbench import records
from inferbench.analysis import frames as analysis
from inferbench.analysis import plots
from inferbench.base.codec import encode
from inferbench.cli.summary import NOT_A_BENCHMARK, format_summary
from inferbench.measure.stats import summarize
from inferbench.report import main


def _record(framework, model="mobilenet_v3_large", bs=1, p50=5.0, cpu="Test CPU", rounds=8, quick=False,
            wobble=0.01, valid=True, **extra):
    """A measured record: ``rounds`` rounds of 10 samples, the rounds apart by ``wobble`` (0.3: unstable)."""
    lat = [p50 * (1 + wobble * (r % 3 - 1)) * (1 + 0.002 * (i % 5)) for r in range(rounds) for i in range(10)]
    rr = [r for r in range(rounds) for _ in range(10)]
    return make_record(framework, model=model, batch_size=bs, latency_ms=summarize(lat, rr), raw_latencies_ms=lat,
                       raw_rounds=rr, throughput_per_s=1000 * bs / p50,
                       config={"device": {"kind": "cpu", "gpu": None}, "threads": 2, "quick": quick,
                               "timing": {"rounds": rounds}},
                       environment={"cpu": {"model": cpu}}, validity={"valid": valid, "reason": "test"}, **extra)


def _write(folder: Path, recs) -> Path:
    for r in recs:
        records.write_record(folder, r)
    return folder


def test_no_figure_is_taller_than_a_screenful_of_panels(tmp_path):
    """40 models x 2 batch sizes x 3 frameworks: 40 panels per figure before; now at most 12, and said."""
    from inferbench.registry.models import MODELS

    models = list(MODELS)[:40]
    recs = [_record(fw, model=m, bs=bs, p50=p * bs * (1 + i / 40)) for i, m in enumerate(models) for bs in (1, 8)
            for fw, p in (("onnxrt", 4.0), ("openvino", 3.0), ("tf", 12.0))]
    _write(tmp_path / "many", recs)
    out = tmp_path / "report"
    assert main([str(tmp_path / "many"), "--out", str(out)]) == 0
    from PIL import Image

    heights = {png.name: Image.open(png).size[1] for png in out.glob("*.png")}
    assert len(heights) >= 4 and max(heights.values()) <= plots.MAX_HEIGHT_PX, heights
    text = (out / "report.md").read_text()
    assert ("*throughput vs batch size (12 of 40 panels: the fullest, ties in name order; every cell is in the "
            "tables)*") in text
    notes = [t.get_text() for t in plots.throughput_vs_batch(analysis.load(tmp_path / "many")).texts]
    assert any(n.startswith("12 of 40 panels shown (the fullest, ties in name order)") for n in notes)  # on it too
    assert text.split("## Results")[1].count("@224 |") >= 200  # every cell in the table (some models are not 224)


def test_every_plotted_framework_is_in_the_legend_and_log_axes_have_ticks(tmp_path):
    """tf only in a one-batch panel (a dot chart) was left out of the legend; a 3-5 ms axis had one tick label."""
    recs = [_record("onnxrt", bs=bs, p50=4.0 * (1 + bs / 40)) for bs in (1, 4)]
    recs += [_record("openvino", bs=bs, p50=3.5 * (1 + bs / 40)) for bs in (1, 4)]
    recs += [_record("tf", model="resnet50", p50=5.0)]
    df = analysis.load(_write(tmp_path / "run", recs))
    fig = plots.latency_vs_batch(df, "p50")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"onnxrt", "openvino", "tf"} <= set(legend), legend
    ax = next(a for a in fig.axes if a.get_visible() and "mobilenet_v3_large" in a.get_title())
    lo, hi = ax.get_ylim()
    labelled = [t for t, label in zip(ax.get_yticks(), ax.get_yticklabels()) if lo <= t <= hi and label.get_text()]
    assert hi / lo < 10 and len(labelled) >= 3, (lo, hi, labelled)


def test_unstable_and_invalid_cells_are_marked(tmp_path):
    calm = [_record("onnxrt", bs=bs, p50=4.0 * bs) for bs in (1, 4)]
    df = analysis.load(_write(tmp_path / "calm", calm))
    legend = [t.get_text() for t in plots.throughput_vs_batch(df).legends[0].get_texts()]
    assert plots.UNSTABLE not in legend and plots.NOT_VALID not in legend
    rough = [_record("onnxrt", bs=1, p50=4.0, wobble=0.3), _record("onnxrt", bs=4, p50=16.0, valid=False)]
    df = analysis.load(_write(tmp_path / "rough", rough))
    # (the second cell: one worker process, never called stable)
    assert list(df.sort_values("batch_size")["latency_ms.stability.verdict"]) == ["unstable", "unknown"]
    fig = plots.throughput_vs_batch(df)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert plots.UNSTABLE in legend and plots.NOT_VALID in legend
    from matplotlib.collections import PathCollection

    ringed = [c for c in fig.axes[0].collections if isinstance(c, PathCollection) and c.get_sizes()[0] == 110]
    assert len(ringed) == 1 and len(ringed[0].get_offsets()) == 1  # the unstable point only


def test_the_box_plot_marks_the_tables_centre_where_slow_rounds_hold_fewer_samples(tmp_path):
    """Four rounds at 10 ms of 100 samples and four at 20 ms of 50 (a slow round holds fewer in its block): the
    samples' median, the box's line, is 10 ms; the table's p50, the rounds' centre, 14.1 ms. The figure marks the
    table's, with its interval, and says so (it showed the box alone, and a reader saw another centre)."""
    lat, rr = [], []
    for r in range(8):
        level, count = (10.0, 100) if r % 2 == 0 else (20.0, 50)
        lat += [level * (1 + 0.01 * (i % 7 - 3)) for i in range(count)]
        rr += [r] * count
    rec = make_record("onnxrt", latency_ms=summarize(lat, rr), raw_latencies_ms=lat, raw_rounds=rr,
                      throughput_per_s=100.0, config={"device": {"kind": "cpu", "gpu": None}, "threads": 2,
                                                      "quick": False, "timing": {"rounds": 8}},
                      environment={"cpu": {"model": "Test CPU"}}, validity={"valid": True, "reason": "test"})
    df = analysis.load(_write(tmp_path / "uneven", [rec]))
    table = float(df["p50_ms"].iloc[0])
    assert abs(table - 200 ** 0.5) < 0.2 and abs(float(np.median(lat)) - 10.0) < 0.2
    fig = plots.latency_distributions(df)
    (diamond,) = [line for line in fig.axes[0].lines if line.get_marker() == "D"]
    assert list(diamond.get_ydata()) == [table]
    assert plots.RANKED_CENTRE in [t.get_text() for t in fig.legends[0].get_texts()]


def test_every_figure_of_cells_marks_them_alike_and_the_frontier_apart(tmp_path):
    """Crossed: NOT VALID, ringed: unstable, in every figure that draws cells (pareto, latency distributions,
    throughput vs FLOPs and across devices drew neither, and in pareto a ring meant 'on the frontier'); the
    frontier has a mark of its own."""
    from matplotlib.collections import PathCollection

    stats = {m: {"params": 5_000_000, "flops_per_image": flops, "flops_method": "test"}
             for m, flops in (("mobilenet_v3_large", 440_000_000), ("resnet50", 8_000_000_000))}
    folders = []
    for cpu in ("Test CPU", "Other CPU"):  # a folder each: one cell's records share a file name
        recs = []
        for model in ("mobilenet_v3_large", "resnet50"):
            recs += [_record("onnxrt", model=model, bs=bs, p50=4.0 * bs, cpu=cpu, wobble=0.3,
                             model_stats=stats[model])
                     for bs in (1, 4)]
            recs += [_record("openvino", model=model, bs=bs, p50=3.0 * bs, cpu=cpu, valid=False,
                             model_stats=stats[model])
                     for bs in (1, 4)]
        folders.append(_write(tmp_path / cpu, recs))
    df = analysis.load(folders)
    figures = {"pareto": plots.pareto(df), "latency_distributions": plots.latency_distributions(df),
               "throughput_vs_flops": plots.throughput_vs_flops(df), "cross_device": plots.cross_device(df)}
    for name, fig in figures.items():
        assert fig is not None, name
        legend = [t.get_text() for t in fig.legends[0].get_texts()] if fig.legends else []
        assert plots.UNSTABLE in legend and plots.NOT_VALID in legend, (name, legend)
        ax = next(a for a in fig.axes if a.get_visible())
        ringed = [c for c in ax.collections if isinstance(c, PathCollection) and c.get_sizes()[0] == 110]
        assert ringed, name  # the rings are the unstable mark's, and only its
    front = [t.get_text() for t in figures["pareto"].legends[0].get_texts()]
    assert plots.FRONTIER in front and "on the frontier" not in " ".join(t for t in front if t != plots.FRONTIER)


def test_a_framework_and_its_variants_differ_in_colour_and_a_rate_axis_starts_at_zero(tmp_path):
    recs = [_record("tf", bs=bs, p50=20.0 * (1 + bs / 100)) for bs in (1, 4)]
    recs += [_record("tf", bs=bs, p50=17.0 * (1 + bs / 100), variant="tuned") for bs in (1, 4)]
    df = analysis.load(_write(tmp_path / "run", recs))
    fig = plots.throughput_vs_batch(df)
    legend = dict(zip([t.get_text() for t in fig.legends[0].get_texts()], fig.legends[0].legend_handles))
    assert {"tf", "tf+tuned"} <= set(legend), legend
    from matplotlib.colors import to_hex

    colours = {name: to_hex(h.get_color()) for name, h in legend.items() if name in ("tf", "tf+tuned")}
    assert colours["tf"] != colours["tf+tuned"], colours
    assert fig.axes[0].get_ylim()[0] == 0  # 47-61 samples/s is no fourfold gap


def test_quick_looks_are_never_pooled_with_measurements(tmp_path):
    measured = _write(tmp_path / "run", [_record("onnxrt", p50=4.0), _record("openvino", p50=3.0)])
    zoo = _write(tmp_path / "zoo", [_record("tf", p50=1.0, rounds=1), _record("torch", p50=2.0, quick=True,
                                                                               rounds=3)])
    out = tmp_path / "report"
    assert main([str(measured), str(zoo), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    aside = text.split("## Quick looks, set apart")[1].split("\n## ")[0]
    assert "2 records are quick looks" in aside and aside.rstrip().endswith("zoo.")  # the folder named
    # the answer first, then what was set apart from it, before the tables
    assert text.index("## Recommendation") < text.index("## Quick looks, set apart") < text.index("## Results")
    results = text.split("## Results")[1].split("\n## ")[0]
    assert "| onnxrt |" in results and "| tf |" not in results and "| torch |" not in results
    answer = text.split("## Recommendation")[1].split("\n## ")[0]
    assert ": openvino, 3.0" in answer and " tf" not in answer  # tf's quick 1 ms is neither the answer nor in it
    assert main([str(zoo), "--out", str(tmp_path / "alone")]) == 0  # on their own: shown, and said to be
    assert "**Every record here is a quick look**" in (tmp_path / "alone" / "report.md").read_text()
    mask = analysis.quick_looks(analysis.load([measured, zoo]))
    assert sorted(mask.astype(int)) == [0, 0, 1, 1]


def test_cross_device_rows_share_model_resolution_and_batch(tmp_path):
    a = [_record("onnxrt", bs=1, p50=4.0, cpu="CPU A"), _record("onnxrt", bs=8, p50=20.0, cpu="CPU A")]
    b = [_record("onnxrt", bs=8, p50=10.0, cpu="CPU B")]
    df = analysis.load([_write(tmp_path / "a", a), _write(tmp_path / "b", b)])
    fig = plots.cross_device(df)
    (ax,) = [x for x in fig.axes if x.get_visible()]
    assert ax.get_title().startswith("throughput across devices: mobilenet_v3_large@224, batch 8")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["onnxrt, CPU A", "onnxrt, CPU B"]
    only_bs1 = analysis.load([tmp_path / "a"])
    assert plots.cross_device(only_bs1) is None


def test_one_round_timings_make_no_claim():
    """The zoo's one short round per cell: its summary recommends nothing; elsewhere a margin without an interval
    names the runner-up and claims no ratio."""
    recs = [encode_record(r) for r in (_record("onnxrt", p50=4.0, rounds=1), _record("tf", p50=9.0, rounds=1))]
    zoo = format_summary(recs, "p50", 200, benchmark=False)
    assert NOT_A_BENCHMARK in zoo and "recommendation (" not in zoo and "better than" not in zoo
    run = format_summary(recs, "p50", 200)
    assert "no claim over tf: no interval" in run and "better than" not in run
    with_rounds = [encode_record(r) for r in (_record("onnxrt", p50=4.0), _record("tf", p50=9.0))]
    assert "2.25x better than tf [95% CI" in format_summary(with_rounds, "p50", 200)


def encode_record(record):
    from inferbench.base.codec import encode

    return encode(record)



def test_reduced_precision_cells_that_pass_join_the_frontiers_and_power_fits_named_by_precision(tmp_path):
    """A BF16 cell that passed parity is on the latency/throughput and energy frontiers beside FP32 (one panel, its
    precision in its name) and gets its own power fit; one that failed parity is on none."""
    def energy(bs, watts):
        return {"available": True, "mean_power_w": watts * (1 + bs / 16), "joules_per_inference": watts / 1000}

    passed = {**encode(make_record().parity), "precision": "bf16"}
    recs = [_record("onnxrt", bs=bs, p50=4.0 * bs, energy=energy(bs, 20.0)) for bs in (1, 2, 4, 8)]
    recs += [_record("openvino", bs=bs, p50=1.5 * bs, precision="bf16", parity=passed, energy=energy(bs, 18.0))
             for bs in (1, 2, 4, 8)]
    recs += [_record("torch-native", bs=bs, p50=1.0 * bs, precision="fp16", energy=energy(bs, 10.0),
                     parity={**passed, "precision": "fp16", "status": "failed"}) for bs in (1, 2, 4, 8)]
    # INT8 passed by its accuracy on labelled images joins them (a plus); INT8 unjudged (speed only) does not
    recs += [_record(fw, bs=bs, p50=3.0 * bs, precision="int8", energy=energy(bs, 25.0),
                     parity={**passed, "precision": "int8", "status": status})
             for fw, status in (("onnxrt", "passed"), ("openvino", "unjudged")) for bs in (1, 2, 4, 8)]
    df = analysis.load(_write(tmp_path / "mixed", recs))
    fig = plots.pareto(df)
    assert len(fig.axes) == 1 or sum(ax.has_data() for ax in fig.axes) == 1  # one panel: every precision in it
    legend = [t.get_text() for t in fig.legends[0].get_texts()] if fig.legends else \
        [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "openvino:bf16" in legend and "onnxrt" in legend and "torch-native:fp16" not in legend
    assert "onnxrt:int8" in legend and "openvino:int8" not in legend
    shapes = {len(c.get_paths()[0].vertices) for c in fig.axes[0].collections if len(c.get_offsets())}
    assert len(shapes) == 4  # FP32's dots, BF16's triangles, INT8's pluses, the frontier's hexagons
    _, fits = plots.power_vs_throughput(df)
    assert set(fits["framework"]) == {"onnxrt", "openvino:bf16", "onnxrt:int8"}
    out = tmp_path / "report"
    assert main([str(tmp_path / "mixed"), "--out", str(out)]) == 0
    frontier = (out / "report.md").read_text().split("**Energy frontier**")[1].split("**Podium")[0]
    assert "openvino:bf16" in frontier and "torch-native:fp16" not in frontier


def test_a_failed_cell_whose_blocks_were_read_gets_its_error_curve_in_the_report(tmp_path):
    from inferbench.measure.parity import divergence

    names = [f"features.{i}" for i in range(16)] + ["classifier"]
    errors = [1e-3 * 1.2 ** i for i in range(16)] + [float("inf")]  # the logits overflow
    blocks = divergence({"names": names, "errors": errors}, 0.04)
    failed = {**encode(make_record().parity), "status": "failed", "precision": "fp16", "blocks": blocks,
              "reason": f"non-finite outputs; {blocks['said']}"}
    recs = [_record("onnxrt"), _record("torch-native", precision="fp16", parity=failed)]
    out = tmp_path / "report"
    assert main([str(_write(tmp_path / "run", recs)), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "diverges first at classifier (relative error inf &gt; 0.04" in text
    assert "![where parity failed" in text and (out / "parity_blocks.png").exists()
    fig = plots.divergence(analysis.load(tmp_path / "run"))
    (ax,) = [a for a in fig.axes if a.has_data()]
    assert ax.get_yscale() == "log" and ax.lines[-1].get_ydata()[0] == 0.04  # the gate, dashed
    assert any(t.get_text() == "first: classifier (not finite)" for t in ax.texts)


def test_a_tasks_post_processing_is_drawn_beside_the_models_call_with_its_share(tmp_path):
    """A detector's suppression timed as its own phase: the report shows each verified cell's call and the
    post-processing after it, stacked, with the share; a run without post-processing gets no such figure."""
    post = {"what": "boxes decoded, class-aware non-maximum suppression", "where": "outside the timed call",
            "ms_p50": 3.0, "calls": 20, "batch_size": 1}
    recs = [_record(fw, p50=p, task="detection", postprocess=post) for fw, p in (("onnxrt", 1.0), ("openvino", 3.0))]
    df = analysis.load(_write(tmp_path / "det", recs))
    fig = plots.postprocess_share(df)
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["50% post", "75% post"]
    assert sorted(t.get_text() for t in ax.get_yticklabels()) == ["onnxrt bs1", "openvino bs1"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["the model's call (p50)", "post-processing after it (p50)"]
    assert plots.postprocess_share(analysis.load(_write(tmp_path / "plain", [_record("onnxrt")]))) is None
    assert main([str(tmp_path / "det"), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "postprocess_share.png").exists()


def _judged(fw, p50, precision, value, fp32=0.3, status="passed", task="detection", key="map"):
    """A cell of ``task`` judged on 24 labelled images: its main metric ``key`` beside FP32's."""
    block = {"value": value, "fp32": fp32} if key != "top1" else {"accuracy": value, "fp32": fp32}
    said = {"said": f"COCO mAP@[.5:.95] {value:.3f}", "metric": "COCO mAP@[.5:.95]"} if key == "map" else {}
    return _record(fw, p50=p50, precision=precision, task=task, parity={
        "status": "passed" if status in ("passed", "measured") else "failed", "max_abs_err": 0.0,
        "accuracy": {"status": status, "images": 24, key: block, **said}})


def test_a_reduced_precision_is_drawn_by_its_gain_over_its_fp32_against_the_accuracy_it_keeps(tmp_path):
    """Two INT8 cells judged by mAP: one 1.25x faster keeping 25% of FP32's mAP (below the gate), one 2x faster
    keeping 99.3%; each is drawn at its gain and its share, the answer and the report's table say the share; a cell
    not judged by labels is not drawn, and without one judged there is no figure."""
    from inferbench.analysis.answer import reduced_phrase
    from inferbench.analysis.ranking import accuracy_kept, recommendations

    recs = [_judged("onnxrt", 5.0, "fp32", 0.3, status="measured"),
            _judged("onnxrt", 4.0, "int8", 0.075, status="failed"),
            _judged("openvino", 6.0, "fp32", 0.3, status="measured"), _judged("openvino", 3.0, "int8", 0.298)]
    df = analysis.load(_write(tmp_path / "det", recs))
    rows = [{**r.to_dict(), "framework": r["framework_key"]} for _, r in df.iterrows()]
    (rec,) = recommendations(rows)
    kept = {c["cell"]: (round(c["gain"], 2), round(c["accuracy_kept"], 4)) for c in rec["reduced"]}
    assert kept == {"onnxrt:int8": (1.25, 0.25), "openvino:int8": (2.0, 0.9933)}
    failing = next(c for c in rec["reduced"] if c["cell"] == "onnxrt:int8")
    assert "COCO mAP@[.5:.95] 0.075: 25.0% of FP32's (MLPerf's gate failed)" in reduced_phrase(failing, rec)
    fig = plots.precision_tradeoff([rec])
    ax = fig.axes[0]
    drawn = sorted((round(float(x), 2), round(float(y), 2)) for c in ax.containers
                   for x, y in [c.lines[0].get_xydata()[0]])  # each point's marker, its interval's bars beside it
    assert drawn == [(1.25, 25.0), (2.0, 99.33)]
    assert 99 in [round(float(line.get_ydata()[0])) for line in ax.lines if line.get_linestyle() == "--"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"onnxrt:int8", "openvino:int8", "MLPerf's gate: 99% of FP32's"} <= set(legend)
    assert "COCO mAP@[.5:.95] kept" in ax.get_ylabel()
    from inferbench.registry.tasks import TASKS, task_module
    assert [TASKS[t].headline for t in ("detection", "segmentation")] == [  # the declaration and the task's own
        task_module(t).METRICS[0][0] for t in ("detection", "segmentation")]
    top1 = _judged("onnxrt", 4.0, "int8", 0.7, fp32=0.8, task="classification", key="top1")
    assert accuracy_kept(encode(top1)) == pytest.approx(0.875)
    assert accuracy_kept(encode(_judged("onnxrt", 4.0, "int8", 0.7, task="raw"))) is None
    assert accuracy_kept(encode(_judged("onnxrt", 5.0, "fp32", 0.3, status="measured"))) is None  # FP32: the reference
    unjudged = [_record("onnxrt", p50=5.0), _record("onnxrt", p50=4.0, precision="int8")]
    plain = [{**r.to_dict(), "framework": r["framework_key"]} for _, r in
             analysis.load(_write(tmp_path / "plain", unjudged)).iterrows()]
    assert plots.precision_tradeoff(recommendations(plain)) is None
    assert main([str(tmp_path / "det"), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "precision_tradeoff.png").exists()
    assert "| 25.0% of FP32's COCO mAP@" in (tmp_path / "report" / "report.md").read_text()
