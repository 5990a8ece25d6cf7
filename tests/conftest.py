"""Test set-up shared by every test module.

TF_USE_LEGACY_KERAS must be in the environment before TensorFlow is imported
anywhere (tfmot needs Keras 2), and child processes (Beam workers, trainer
subprocesses) inherit it from here.
"""
import os

os.environ['TF_USE_LEGACY_KERAS'] = '1'
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
