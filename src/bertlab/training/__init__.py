"""Training in Lightning: the LightningModules, their DataModules and callbacks, the Trainer set-up."""
