"""The last blessed model without ML Metadata: records kept by the Pusher."""
