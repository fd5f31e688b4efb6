"""The run: client training and its workers, the round engine and the server paths, evaluation, checkpoints and
resume, the run folder and the trainer's base."""
