"""What LLM calls will cost before they are sent: the requests a configuration sends (``calls``), the
passages that stand in for retrieval (``passages``), the estimate (``estimate``) and its table
(``render``)."""
