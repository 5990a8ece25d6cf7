"""Model code called by TFX: preprocessing_fn and run_fn."""
