#!/usr/bin/env python3
"""Drive `ruvllm serve` with the official openai client (PyPI: openai,
the version tests/cli/t0181-serve-openai.sh pins) and print what it got as
one JSON object, for the test to compare with `ruvllm run --chat`.

    openai_client.py BASE_URL MAX_TOKENS COMPLETION_PROMPT CHAT_PROMPT...

For each prompt (one user message), greedy (temperature 0): the whole
answer ("whole"), the streamed one put together ("stream", with the
finish reasons of its chunks), and the whole answers again from
len(PROMPT) threads at once ("concurrent": every request in flight
together, so the server batches them). Also the model list and a text
completion of COMPLETION_PROMPT.
"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import openai


def main():
    base, max_tokens, text_prompt, prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)

    def whole(p):
        r = client.chat.completions.create(model="any", temperature=0, max_tokens=max_tokens,
                                           messages=[{"role": "user", "content": p}])
        c = r.choices[0]
        return {"text": c.message.content, "finish": c.finish_reason, "object": r.object,
                "usage": [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens]}

    def stream(p):
        text, fin, n = "", [], 0
        for ch in client.chat.completions.create(model="any", temperature=0,
                                                 max_tokens=max_tokens, stream=True,
                                                 messages=[{"role": "user", "content": p}]):
            n += 1
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                if ch.choices[0].finish_reason:
                    fin.append(ch.choices[0].finish_reason)
        return {"text": text, "finish": fin, "chunks": n}

    out = {"models": [m.id for m in client.models.list().data], "prompts": {}}
    for p in prompts:
        out["prompts"][p] = {"whole": whole(p), "stream": stream(p)}
    with ThreadPoolExecutor(max_workers=len(prompts)) as ex:
        for p, r in zip(prompts, ex.map(whole, prompts)):
            out["prompts"][p]["concurrent"] = r
    c = client.completions.create(model="any", prompt=text_prompt, temperature=0,
                                  max_tokens=max_tokens)
    out["completion"] = {"text": c.choices[0].text, "finish": c.choices[0].finish_reason}
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
