"""AutoTuner: TFX's Tuner for ``--tune auto``, searching only when the network trails."""
