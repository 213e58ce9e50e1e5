"""On-policy algorithms: each module holds an agent, its factory and a workflow subclass."""
