"""Small data sets shipped inside the package (see ``MANIFEST.tsv`` beside this file).

Load them with :func:`kernelstream.data.load_dataset`; list them with
:func:`kernelstream.data.embedded_datasets`.
"""
