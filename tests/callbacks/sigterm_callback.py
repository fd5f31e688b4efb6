"""Sends SIGTERM to the run's whole process group while round 2 trains (the two-process SIGTERM test)."""

import os
import signal

from lightfed.callbacks import Callback


class TerminateDuringRoundTwo(Callback):
    def on_client_end(self, trainer, update):
        if trainer.round == 1 and trainer.fabric.is_global_zero and not getattr(self, "sent", False):
            self.sent = True
            os.killpg(os.getpgid(0), signal.SIGTERM)  # what scancel does to every task of a job
