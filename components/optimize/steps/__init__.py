"""The optimizer's steps, one module each; flow.optimize runs them in order."""
