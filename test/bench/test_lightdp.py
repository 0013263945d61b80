"""dpr bench lightdp: rows from YAML, one interleaved measurement, the table's columns."""

import json

import pytest

from diffusion_policy_ros.bench.lightdp import (
    BenchRow,
    eval_figures,
    format_table,
    load_rows,
    measure,
)


def test_the_shipped_rows_have_one_reference_and_the_seed_documents_rows():
    rows = load_rows()
    assert sum(r.reference for r in rows) == 1
    labels = " ".join(r.label for r in rows)
    for needed in ("DDIM-100", "consistency 1 step", "consistency 2 steps",
                   "consistency 4 steps", "8->6", "8->4", "ONNX Runtime", "bf16"):
        assert needed in labels, needed


def test_a_rows_file_without_exactly_one_reference_is_refused(tmp_path):
    path = tmp_path / "rows.yaml"
    path.write_text("rows:\n  - {label: a, checkpoint: x}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="exactly one row must be the reference"):
        load_rows(path)


def test_measure_and_format_a_table_with_eval_reports(tiny_checkpoint, tmp_path):
    report, second = tmp_path / "task.json", tmp_path / "task_b.json"
    report.write_text(json.dumps({"summary": {"episodes": 10, "success_rate": 0.9,
                                              "wrong_object_rate": 0.0, "grasp_retry": True}}),
                      encoding="utf-8")
    second.write_text(json.dumps({"summary": {"episodes": 30, "success_rate": 0.5,
                                              "wrong_object_rate": 0.1}}), encoding="utf-8")
    rows = [BenchRow("ref", str(tiny_checkpoint), steps=4, samples=2, reference=True),
            BenchRow("fast", str(tiny_checkpoint), steps=1, samples=1, precision="bf16",
                     evals={"task": str(report)}),
            BenchRow("summed", str(tiny_checkpoint), steps=1, samples=1,
                     evals={"task": [str(report), str(second)],
                            "switch": [str(report), str(tmp_path / "missing.json")]})]
    results = measure(rows, chunks=3, threads=(1,), progress=False)
    assert [(r["label"], r["chunks"]) for r in results] == [("ref", 3), ("fast", 3),
                                                              ("summed", 3)]
    assert results[0]["speedup"] == pytest.approx(1.0)
    table = format_table(results, "test machine")
    assert "| **ref** (reference) | torch, fp32 |" in table
    fast = next(line for line in table.splitlines() if line.startswith("| fast"))
    assert "torch, bf16" in fast and "| 9/10 | 0.00 |" in fast
    # Reports of consecutive seed ranges add up; a kind with a missing report shows "-".
    summed = next(line for line in table.splitlines() if line.startswith("| summed"))
    # A report without the grasp retry marks the cell.
    assert "| 24/40 * | 0.07 * | - |" in summed


def test_a_report_of_another_configuration_is_refused(tmp_path):
    report = tmp_path / "task.json"
    report.write_text(json.dumps({"summary": {
        "episodes": 10, "success_rate": 0.9, "wrong_object_rate": 0.0, "grasp_retry": True,
        "policy": {"checkpoint": "/repo/checkpoints/student", "backend": "torch",
                   "precision": "fp32", "num_inference_steps": 1, "num_samples": 8}}}),
        encoding="utf-8")
    student = "checkpoints/student"
    assert eval_figures(BenchRow("K 8", student, samples=8, evals={"task": str(report)}))[
        "task"]["episodes"] == 10
    with pytest.raises(ValueError, match="num_samples 8 != 4"):
        eval_figures(BenchRow("K 4", student, samples=4, evals={"task": str(report)}))
    with pytest.raises(ValueError, match="backend torch != onnxruntime"):
        eval_figures(BenchRow("onnx", student, backend="onnxruntime",
                              evals={"task": str(report)}))
    with pytest.raises(ValueError, match="checkpoint"):
        eval_figures(BenchRow("teacher", "checkpoints/teacher", evals={"task": str(report)}))
