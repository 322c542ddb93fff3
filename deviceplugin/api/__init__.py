"""Generated v1beta1 stubs (see api.proto and regen.sh); import as `from deviceplugin.api import api_pb2`."""
