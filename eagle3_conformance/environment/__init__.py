"""What is installed and where the shipped files are: installed distributions and extras
(``installed``), the engines' names (``engines``), the shipped contracts and docs in a checkout or
a wheel (``shipped``), torch's thread and dtype set-up (``torch_env``), the validated tool versions
(``validated``) and process groups of launched engines (``procgroup``)."""
