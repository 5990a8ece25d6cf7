"""The optimizer's steps, one module each, in the order flow.optimize runs them."""
