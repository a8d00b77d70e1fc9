"""Models the project ships or makes: the built-in tiny model (`tiny`), random-init models of real
architectures (`random`) and their tokenizers (`tokenizer`)."""
