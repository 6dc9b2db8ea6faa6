"""Where results go and how they are read back: run folder, records, provenance, references."""
