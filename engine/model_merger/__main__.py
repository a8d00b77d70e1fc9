"""`python -m engine.model_merger merge|test ...`: verl's model-merger command line (see __init__)."""
from __future__ import annotations

import argparse
import sys

from engine.model_merger.to_hf import MergerError, compare, merge


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", required=True, help="fsdp (rlstudio saves FSDP2 checkpoints)")
    common.add_argument("--local_dir", help="<trainer.default_local_dir>/global_step_N/actor (or .../critic)")
    common.add_argument("--trust-remote-code", action="store_true", help="load a custom model class")
    common.add_argument("--base_model", help="a LoRA checkpoint's base model (default: the path it recorded in "
                        "lora/adapter_config.json, the run's actor_rollout_ref.model.path)")
    # verl's Megatron-only switches: accepted so verl's commands run; an FSDP checkpoint already records both
    common.add_argument("--tie-word-embedding", action="store_true", help="(Megatron only; read from the config)")
    common.add_argument("--is-value-model", action="store_true", help="(Megatron only; read from the config)")
    common.add_argument("--use_cpu_initialization", action="store_true", help="(always: the merge runs on the CPU)")
    top = argparse.ArgumentParser(prog="python -m engine.model_merger",
                                  description="A saved checkpoint as a Hugging Face model directory.")
    ops = top.add_subparsers(dest="operation", required=True)
    merge_op = ops.add_parser("merge", parents=[common], help="write the checkpoint as an HF model directory")
    merge_op.add_argument("--target_dir", default="tmp", help="the HF model directory to write (default: tmp)")
    merge_op.add_argument("--hf_upload_path", help="(not supported: upload --target_dir yourself)")
    merge_op.add_argument("--private", action="store_true", help="(with --hf_upload_path; not supported)")
    test_op = ops.add_parser("test", parents=[common], help="compare the checkpoint's weights with an HF model")
    test_op.add_argument("--test_hf_dir", required=True, help="the HF model directory to compare with")
    return top


def run(args: argparse.Namespace) -> int:
    if args.backend != "fsdp":
        raise MergerError(f"--backend {args.backend}: rlstudio saves FSDP2 checkpoints only; use --backend fsdp")
    if args.operation == "merge":
        if args.hf_upload_path or args.private:
            raise MergerError("--hf_upload_path/--private: uploading is not supported here; merge into "
                              "--target_dir, then upload that folder (e.g. `huggingface-cli upload`)")
        target = merge(args.local_dir, args.target_dir, trust_remote_code=args.trust_remote_code,
                       base_model=args.base_model)
        print(f"Merged {args.local_dir} into {target}")
        return 0
    worst = compare(args.local_dir, args.test_hf_dir, trust_remote_code=args.trust_remote_code,
                    base_model=args.base_model)
    same = worst <= 1e-6
    print(f"{'Same' if same else 'Different'} weights: largest |difference| {worst:.3g} between {args.local_dir} "
          f"and {args.test_hf_dir}")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)  # argparse's own errors (missing --backend, ...) exit 2 with the usage
    try:
        return run(args)
    except MergerError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
