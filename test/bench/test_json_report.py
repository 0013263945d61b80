import json

from diffusion_policy_ros.bench.json_report import write_json


def test_writes_the_payload_as_json(tmp_path):
    path = tmp_path / "rows.json"
    rows = [{"shape": "1x8", "torch_us_p50": 1.5}]
    write_json(path, rows)
    assert json.loads(path.read_text(encoding="utf-8")) == rows


def test_no_path_writes_nothing(tmp_path):
    write_json(None, {"rows": []})
    write_json("", {"rows": []})
    assert list(tmp_path.iterdir()) == []
