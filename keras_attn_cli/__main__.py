import sys

from keras_attn_cli import main

sys.exit(main())
