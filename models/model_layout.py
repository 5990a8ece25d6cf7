"""The trained model contract: what a Trainer Model artifact holds.

Written by ``leantfx.models.model.run_fn``; read by warm start
(models/warm_start.py), the ModelOptimizer (components/optimize/), the
serving side and the benchmarks:

  <Model artifact uri>/Format-Serving/  SavedModel with signatures
      serving_default (raw features), predict_examples (serialized
      tf.Example -> probabilities) and transform_features. TFX's Trainer
      chooses this folder (fn_args.serving_model_dir).
  <Model artifact uri>/Format-Keras/    the bare tf_keras model (SavedModel
      format, load with tf_keras.models.load_model): inputs are a dict of
      transformed features, the layer named 'logits' is the last Dense layer
      and the final layer is Activation('softmax', name='probabilities').
      A regression model ends in a one-unit Dense 'logits' and
      Rescaling(name='predictions'), float32 [batch, 1] in target units;
      its Format-Serving also has a 'regression' signature (method
      tensorflow/serving/regress: serialized tf.Examples 'inputs' ->
      'outputs') for TF Serving's :regress.
  On tabular data Format-Serving may hold gradient-boosted trees instead
  (the same signatures; TF-DF's ops inside: models/model_family.py,
  leantfx/decision_forests.py); Format-Keras is always the network.

It lives with the model code, the lowest layer that needs it, so that the
components above read it from here and models/ never imports a component.
"""

SERVING_MODEL_DIR = 'Format-Serving'
KERAS_MODEL_DIR = 'Format-Keras'
LOGITS_LAYER = 'logits'
PROBABILITIES_LAYER = 'probabilities'
# A regression model's last layer: float32 predictions in target units.
PREDICTIONS_LAYER = 'predictions'
# The Model artifact's custom property with the optimizer steps the Trainer
# trained for (models/training/trainer_executor.py sets it); the
# ModelOptimizer caps its techniques' steps by it.
TRAIN_STEPS_PROPERTY = 'train_steps'
