"""A catalog entry whose LoRA targets match nothing is refused at submit (issue 15)."""

from __future__ import annotations

from importlib import resources

from jobs_helpers import setup_project, write_plan

from helpers import LiveService, free_port

# The tiny model's entry, merged over the shipped one: a regex no module of it matches.
OVERRIDE = """catalog:
  - include: shipped
  - repository: akka-optimize/tiny-smollm2
    loraTargetModules: 'model\\.language_model\\.layers\\.\\d+\\.self_attn\\.q_proj'
"""


def test_targets_matching_nothing_are_refused_naming_the_field_and_family(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shipped = resources.files("akka_optimize").joinpath("deployment.yaml").read_text()
    assert "\ncatalog: null" in shipped
    (home / "deployment.yaml").write_text(shipped.replace("\ncatalog: null\n", "\n" + OVERRIDE))
    svc = LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()
    try:
        setup_project(svc, tmp_path)
        plan = write_plan(tmp_path / "plan.json", epochs=1)
        out = svc.cli("training", "runs", "start", "-f", str(plan))
        assert out.returncode != 0
        text = out.stdout + out.stderr
        assert "loraTargetModules" in text and "family llama" in text, text
        assert "akka-optimize/tiny-smollm2" in text
        assert svc.api("GET", "/v1/training/runs").json()["runs"] == []  # nothing recorded
    finally:
        svc.stop()
