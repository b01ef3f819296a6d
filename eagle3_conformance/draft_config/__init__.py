"""What each tool reads from a draft's ``config.json``: the layer ids (``config_ids``), the draft's
norms (``draft_norms``), a draft directory with the ids written where an engine reads them
(``draft_dir``) and the DFlash fallback (``dflash_fallback``)."""
