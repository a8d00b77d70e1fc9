"""A trained role's weights on disk: sharded checkpoints written and resumed by the workers (sharded.py) and
ordinary Hugging Face model folders (export.py: the final export and `python -m engine.model_merger`)."""
