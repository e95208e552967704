"""goaai: run AI agents and record everything they do."""
