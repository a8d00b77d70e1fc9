import types

from engine.trainer import checkpointing


def trainer_at(root, mode="auto"):
    return types.SimpleNamespace(cfg=types.SimpleNamespace(trainer=types.SimpleNamespace(resume_mode=mode)),
                                 ckpt_root=str(root))


def test_pointer_to_a_missing_checkpoint_warns_and_starts_fresh(tmp_path, capsys):
    (tmp_path / checkpointing.LATEST).write_text("7")
    assert checkpointing.resume_dir(trainer_at(tmp_path)) is None
    err = capsys.readouterr().err
    assert "latest_checkpointed_iteration.txt" in err and "does not exist" in err and "resume_path" in err


def test_pointer_to_an_existing_checkpoint_resumes_there(tmp_path, capsys):
    (tmp_path / "global_step_7").mkdir()
    (tmp_path / checkpointing.LATEST).write_text("7")
    assert checkpointing.resume_dir(trainer_at(tmp_path)) == str(tmp_path / "global_step_7")
    assert capsys.readouterr().err == ""
    assert checkpointing.resume_dir(trainer_at(tmp_path, "disable")) is None
