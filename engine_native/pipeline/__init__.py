"""The stages `Engine` delegates to, named from the data path:

    text -> text_frontend -> t3_session -> s3gen_flow -> vocoder_stream -> Chunk
                              (scheduler drives them per sentence)

model (hyper-parameters from the GGUF, devices, loading), request (a request's options),
cloning (a recording -> a Voice), concurrency (fair lock, cancel token, Stream), profile
(each stage's timings and hooks) and stages (`Engine.stages`: the loaded pipeline).
"""
