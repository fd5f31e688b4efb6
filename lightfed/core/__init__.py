"""The engine: local training of one client, the round's sums and reduction, flat views, messages, checkpoints."""
