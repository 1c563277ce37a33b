/* The engine's model side for a tensor-parallel Llama (model/tp.h): every step runs on all
 * ranks, each with its own KV cache of the same block ids, so the scheduler stays one. */
#ifndef TC_TP_ENGINE_H
#define TC_TP_ENGINE_H
#include "inference/engine.h"
#include "model/tp.h"

/* The model description for tc_engine_create: forward passes through tc_tp_forward (logits on
 * rank 0's backend) and block copies on every rank. kv must have been made for tp and both
 * must outlive the engine. */
tc_engine_model tc_engine_model_tp(tc_tp *tp, tc_tp_kv *kv);

#endif /* TC_TP_ENGINE_H */
